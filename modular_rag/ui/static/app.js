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

setupAsk();
setupCompare();
setupExport();
// the page holds a passage box only on Ask; on Compare a citation opens it below the columns
if (!$("#passage") && $("#comparison")) {
  $("#comparison").after(el("div", { id: "passage", class: "passage", hidden: "" }));
}
