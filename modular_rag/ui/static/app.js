// modular-rag workbench: what must happen in the browser. Hand-written, no library, no build step.
"use strict";

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
};

function showMessage(text) {
  const box = $("#message");
  box.textContent = text;
  box.hidden = !text;
}

async function postJSON(url, body) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  let data;
  try {
    data = await response.json();
  } catch (e) {
    throw new Error(`the server answered ${response.status} without JSON`);
  }
  if (!response.ok || data.error) throw new Error(data.error || `the server answered ${response.status}`);
  return data;
}

async function getJSON(url) {
  const response = await fetch(url);
  let data;
  try {
    data = await response.json();
  } catch (e) {
    throw new Error(`the server answered ${response.status} without JSON`);
  }
  if (!response.ok || data.error) throw new Error(data.error || `the server answered ${response.status}`);
  return data;
}

// Server-Sent Events over a POST (EventSource only GETs): "event: name\ndata: json\n\n" blocks.
async function streamEvents(url, body, onEvent) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!response.ok) {
    let text = `the server answered ${response.status}`;
    try { text = (await response.json()).error || text; } catch (e) { /* not JSON */ }
    throw new Error(text);
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      if (data) onEvent(JSON.parse(data));
    }
  }
}

function answerBlock(run, onCite) {
  const box = el("div", { class: "answer-text" });
  const answer = run.answer || {};
  // the answer's [n] markers become buttons that open the cited passage
  const parts = String(answer.text || "").split(/(\[\d+\])/);
  for (const part of parts) {
    const m = part.match(/^\[(\d+)\]$/);
    if (m && onCite) box.append(el("button", { class: "cite", "data-ref": m[1], type: "button", onclick: () => onCite(run, Number(m[1])) }, part));
    else box.append(part);
  }
  const wrap = el("div", {}, box);
  if (answer.refused) wrap.append(el("p", { class: "warn" }, `refused: ${answer.reason || "the evidence does not answer it"}`));
  for (const flag of answer.flags || []) wrap.append(el("p", { class: "warn" }, `FLAG: ${flag}`));
  if ((run.failed_steps || []).length) {
    wrap.append(el("p", { class: "warn" }, `${run.failed_steps.length} step(s) failed and the flow went on under on_error: skip (${run.failed_steps.join(", ")}): this answer is the fallback's`));
  }
  return wrap;
}

function citationList(run, onCite) {
  const list = el("ol", { class: "citations" });
  for (const c of (run.answer || {}).citations || []) {
    const item = el("li", { value: c.ref });
    const link = el("a", { href: "#", class: "citation", "data-ref": c.ref, onclick: (e) => { e.preventDefault(); onCite(run, c.ref); } }, c.title);
    item.append(link, " ", el("span", { class: `verdict ${c.verdict || ""}` }, [c.method, c.verdict].filter(Boolean).join(", ")));
    list.append(item);
  }
  return list;
}

function totalsLine(run) {
  const t = run.totals || {};
  return `${Math.round(t.ms || 0)} ms, ${t.llm_calls || 0} LLM calls, ${(t.prompt_tokens || 0) + (t.completion_tokens || 0)} tokens, ${t.retrievals || 0} retrievals`;
}

function ledgerTable(run) {
  const heads = ["node", "operator", "ms", "LLM calls", "tokens in", "tokens out", "retrievals", "embeddings"];
  const table = el("table", { class: "ledger" }, el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", {}, h)))));
  const body = el("tbody");
  for (const e of run.ledger || []) {
    body.append(el("tr", {}, ...[e.node, e.operator, Math.round(e.ms), e.llm_calls, e.prompt_tokens, e.completion_tokens, e.retrievals, e.embed_calls].map((v) => el("td", {}, v))));
  }
  table.append(body);
  return el("div", {}, table, el("p", { class: "total" }, `total: ${totalsLine(run)}; first node after ${Math.round(run.first_node_ms)} ms, answer after ${Math.round(run.total_ms)} ms`));
}

async function openPassage(run, ref) {
  const box = $("#passage");
  try {
    const p = await (async () => {
      const r = await fetch(`/api/passage/${encodeURIComponent(run.run_id)}/${ref}`);
      const d = await r.json();
      if (!r.ok || d.error) throw new Error(d.error || `the server answered ${r.status}`);
      return d;
    })();
    const text = el("div", { class: "passage-text" });
    if (p.start !== null && p.start !== undefined) {
      text.append(p.text.slice(0, p.start), el("mark", {}, p.text.slice(p.start, p.end)), p.text.slice(p.end));
    } else {
      text.append(p.text);
    }
    box.replaceChildren(
      el("h3", {}, `[${p.ref}] ${p.title}`),
      el("p", { class: `verdict ${p.verdict}` }, `attribution check: ${p.verdict}${p.reason ? ` (${p.reason})` : ""}; citation: ${p.method || "?"}; chunk ${p.chunk_id}`),
      text,
    );
    box.hidden = false;
  } catch (err) {
    showMessage(err.message);
  }
}

// ---- Ask ----
function setupAsk() {
  const form = $("#ask-form");
  if (!form) return;
  let current = null;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    showMessage("");
    const question = $("#question").value;
    $("#nodes").replaceChildren();
    $("#answer").replaceChildren(el("p", { class: "muted" }, "running ..."));
    $("#citations").replaceChildren();
    $("#passage").hidden = true;
    $("#feedback").hidden = true;
    $("#feedback-done").hidden = true;
    $("#ask").disabled = true;
    try {
      await streamEvents("/api/ask", { question, config: $("#config").value, index: $("#index").value }, (ev) => {
        if (ev.event === "start") {
          $("#graph").innerHTML = ev.graph;  // SVG drawn by the server (modular_rag.ui.drawing)
        } else if (ev.event === "node") {
          $("#nodes").append(el("li", { class: "node-line" }, ev.line));
          const drawn = document.getElementById(`node-${ev.node}`);
          if (drawn) drawn.classList.add("ran");
        } else if (ev.event === "result") {
          current = ev;
          $("#answer").replaceChildren(answerBlock(ev, openPassage));
          $("#citations").replaceChildren(citationList(ev, openPassage));
          $("#ledger").replaceChildren(ledgerTable(ev));
          const select = $("#right-passage");
          select.replaceChildren(el("option", { value: "" }, "(don't know)"));
          const seen = new Set();
          for (const c of [...(ev.evidence || []), ...(ev.candidates || [])]) {
            if (seen.has(c.chunk_id)) continue;
            seen.add(c.chunk_id);
            select.append(el("option", { value: c.chunk_id }, `${c.title} (${c.chunk_id.slice(0, 8)})`));
          }
          $("#feedback").hidden = false;
        } else if (ev.event === "error") {
          $("#answer").replaceChildren(el("p", { class: "muted" }, "no answer"));
          showMessage(ev.message);
        }
      });
    } catch (err) {
      showMessage(err.message);
    } finally {
      $("#ask").disabled = false;
    }
  });
  $("#feedback-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    showMessage("");
    const verdict = (document.querySelector("input[name=verdict]:checked") || {}).value;
    if (!verdict) { showMessage("say whether the answer was right or wrong"); return; }
    try {
      const done = await postJSON("/api/feedback", {
        run_id: current.run_id, verdict,
        right_answer: $("#right-answer").value, right_passage: $("#right-passage").value,
      });
      const note = $("#feedback-done");
      note.textContent = `Thank you: feedback #${done.id} stored in ${done.stored_in}`;
      note.hidden = false;
    } catch (err) {
      showMessage(err.message);
    }
  });
}

// ---- Compare ----
function setupCompare() {
  const form = $("#compare-form");
  if (!form) return;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    showMessage("");
    const configs = [...document.querySelectorAll("input[name=configs]:checked")].map((b) => b.value);
    $("#comparison").replaceChildren(el("p", { class: "muted" }, "running ..."));
    $("#evidence-diff").replaceChildren();
    $("#compare").disabled = true;
    try {
      const data = await postJSON("/api/compare", { question: $("#question").value, configs, index: $("#index").value });
      const cols = data.runs.map((run) => {
        const col = el("section", { class: "run-col", "data-config": run.config }, el("h3", {}, run.config));
        if (run.error) {
          col.append(el("p", { class: "warn" }, run.error));
          return col;
        }
        col.append(answerBlock(run, null), citationList(run, (r, ref) => openPassage(r, ref)), el("p", { class: "total" }, totalsLine(run)));
        return col;
      });
      $("#comparison").replaceChildren(el("div", { class: "run-cols" }, ...cols));
      const heads = ["passage", ...data.configs];
      const table = el("table", { class: "evidence" }, el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", {}, h)))));
      const body = el("tbody");
      for (const row of data.evidence) {
        body.append(el("tr", { class: row.shared ? "shared" : "differs" }, el("td", {}, row.title), ...row.refs.map((r) => el("td", {}, r === null ? "–" : `[${r}]`))));
      }
      table.append(body);
      $("#evidence-diff").replaceChildren(table, el("p", { class: "muted" }, "Rows marked differ were in some configs' evidence and not others'."));
    } catch (err) {
      $("#comparison").replaceChildren();
      showMessage(err.message);
    } finally {
      $("#compare").disabled = false;
    }
  });
}

// ---- Feedback: export ----
function setupExport() {
  const form = $("#export-form");
  if (!form) return;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    showMessage("");
    try {
      const done = await postJSON("/api/export", { index: form.dataset.index, out: $("#export-out").value, overwrite: $("#export-overwrite").checked });
      const box = $("#export-done");
      box.textContent = done.lines.join("\n");
      box.hidden = false;
    } catch (err) {
      showMessage(err.message);
    }
  });
}

// ---- Evaluate: a test set over configs, polled while it runs in the server's worker thread ----
const fixed = (v, digits) => (typeof v === "number" ? v.toFixed(digits) : "–");

function summaryTable(report) {
  // the quality column first ("right" when the set has gold answers), then the figures modular-rag eval prints
  const keys = [report.quality, ...["ndcg@10", "recall@5", "contains", "f1"].filter((k) => k !== report.quality)];
  const names = { right: "right", "ndcg@10": "nDCG@10", "recall@5": "recall@5", contains: "contains", f1: "F1" };
  const heads = ["config", ...keys.map((k) => names[k]), "LLM calls/q", "ms/q", "errors"];
  const table = el("table", { class: "eval-summary" }, el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", {}, h)))));
  const body = el("tbody");
  for (const c of report.configs) {
    if (c.error) {
      body.append(el("tr", { "data-config": c.config }, el("td", {}, c.config), el("td", { class: "warn", colspan: heads.length - 1 }, c.error)));
      continue;
    }
    const s = c.summary;
    const cells = [c.config, ...keys.map((k) => fixed(s[k], 3)), fixed(s.llm_calls, 2), fixed(s.ms, 0), s.errors];
    body.append(el("tr", { "data-config": c.config, title: `pattern ${c.pattern}; retrieval scored on the ${c.scored}` }, ...cells.map((v) => el("td", {}, v))));
  }
  table.append(body);
  return table;
}

function docList(items, line) {
  const list = el("ul", { class: "docs" });
  for (const item of items) list.append(line(item));
  if (!items.length) list.append(el("li", { class: "muted" }, "none"));
  return list;
}

function runBox(run) {
  const verdict = el("p", { class: `verdict-line ${run.verdict === "right" ? "ok" : run.verdict === "wrong" ? "warn" : "muted"}` }, `judged ${run.verdict}`);
  const why = el("ul", { class: "why" }, ...run.why.map((w) => el("li", {}, w)));
  const parts = [el("h3", {}, `${run.config}: ${run.question}`), verdict, why];
  if (run.error) parts.push(el("p", { class: "warn" }, run.error));
  parts.push(answerBlock({ answer: run.answer }, null));
  if (run.gold_answers.length) parts.push(el("p", { class: "muted" }, `gold answers: ${run.gold_answers.join(" | ")}`));
  parts.push(el("h3", {}, "Citations"), docList(run.answer.citations, (c) => el("li", { class: c.gold ? "gold" : "" },
    `[${c.ref}] ${c.title} (${c.doc_id || c.chunk_id}): ${c.gold ? "a gold document" : "not a gold document"}; ${[c.method, c.verdict].filter(Boolean).join(", ")}`)));
  parts.push(el("h3", {}, `Documents the run ${run.scored === "evidence" ? "showed the model" : "retrieved"}`), docList(run.retrieved, (d) => el("li", { class: d.gold ? "gold" : "" }, `${d.rank}. ${d.doc_id}${d.gold ? " (gold)" : ""}`)));
  parts.push(el("h3", {}, "Gold documents"), docList(run.gold, (d) => el("li", {}, `${d.doc_id}: ${d.rank ? `at rank ${d.rank}` : "not retrieved"}`)));
  const m = run.metrics;
  parts.push(el("p", { class: "total" }, `nDCG@10 ${fixed(m["ndcg@10"], 2)}, recall@5 ${fixed(m["recall@5"], 2)}, contains ${fixed(m.contains, 0)}, F1 ${fixed(m.f1, 2)}; ${run.cost.ms} ms, ${run.cost.llm_calls} LLM calls, ${run.cost.tokens} tokens, ${run.cost.retrievals} retrievals`));
  return parts;
}

function questionTable(status, onOpen) {
  const report = status.report;
  const table = el("table", { class: "eval-questions" }, el("thead", {}, el("tr", {}, el("th", {}, "question"), ...status.configs.map((c) => el("th", {}, c)))));
  const body = el("tbody");
  for (const row of report.rows) {
    const cells = row.cells.map((cell) => el("td", {}, el("button", {
      type: "button", class: `cell ${cell.kind}`, "data-config": cell.config, "data-qid": row.qid,
      onclick: (e) => onOpen(e.currentTarget, cell.config, row.qid),
    }, cell.label)));
    body.append(el("tr", { "data-qid": row.qid }, el("td", {}, row.question), ...cells));
  }
  table.append(body);
  return table;
}

function setupEvaluate() {
  const form = $("#evaluate-form");
  if (!form) return;
  const progress = $("#eval-progress");
  async function openRun(button, config, qid, id) {
    try {
      const run = await getJSON(`/api/evaluate/${encodeURIComponent(id)}/run?config=${encodeURIComponent(config)}&qid=${encodeURIComponent(qid)}`);
      for (const b of document.querySelectorAll("button.cell.open")) b.classList.remove("open");
      button.classList.add("open");
      const box = $("#eval-run");
      box.replaceChildren(...runBox(run));
      box.hidden = false;
      box.scrollIntoView({ block: "nearest" });
    } catch (err) {
      showMessage(err.message);
    }
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    showMessage("");
    const configs = [...document.querySelectorAll("input[name=configs]:checked")].map((b) => b.value);
    $("#eval-results").hidden = true;
    $("#eval-run").hidden = true;
    $("#evaluate").disabled = true;
    progress.textContent = "starting ...";
    try {
      let status = await postJSON("/api/evaluate", { dataset: $("#dataset").value, configs, limit: $("#limit").value });
      while (status.state === "queued" || status.state === "running") {
        progress.textContent = `${status.state}: ${status.step || ""} (${status.done}/${status.total || "?"} runs, ${status.seconds} s)`;
        await new Promise((resolve) => setTimeout(resolve, 400));
        status = await getJSON(`/api/evaluate/${encodeURIComponent(status.id)}`);
      }
      if (status.state === "error") throw new Error(status.error);
      const report = status.report;
      progress.textContent = `${report.dataset}: ${report.questions} questions through ${status.configs.length} config(s) in ${status.seconds} s; quality: ${report.quality_label}`;
      $("#eval-summary").replaceChildren(summaryTable(report));
      $("#eval-chart").innerHTML = report.chart;  // SVG drawn by the server (modular_rag.ui.chart)
      $("#eval-questions").replaceChildren(questionTable(status, (button, config, qid) => openRun(button, config, qid, status.id)));
      $("#eval-results").hidden = false;
    } catch (err) {
      progress.textContent = "";
      showMessage(err.message);
    } finally {
      $("#evaluate").disabled = false;
    }
  });
}

setupAsk();
setupCompare();
setupExport();
setupEvaluate();
// the page holds a passage box only on Ask; on Compare a citation opens it below the columns
if (!$("#passage") && $("#comparison")) {
  $("#comparison").after(el("div", { id: "passage", class: "passage", hidden: "" }));
}
