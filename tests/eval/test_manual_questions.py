"""A test set from a manual asks what its users ask (defaults, which option, how to, what an option does), each with
its answer on its page, and nothing from navigation, contents or code; ``right`` judges only answerable questions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modular_rag.eval.datasets import BeirDataset, Query
from modular_rag.eval.runner import QueryRecord, answered_right
from modular_rag.eval.testset import make_testset

_PAGE = """<html><head><title>tidy-up(1)</title></head><body>
<div class="navheader">Prev Up Home Next</div>
<h2>NAME</h2><p>tidy-up - remove what a project no longer needs</p>
<h2>SYNOPSIS</h2><pre>tidy-up [--prune=&lt;date&gt;] [--quiet] [--aggressive]</pre>
<h2>OPTIONS</h2>
<dl>
<dt>--prune=&lt;date&gt;</dt><dd><p>Prune loose files older than date (default is 2 weeks ago).</p></dd>
<dt>-q, --quiet</dt><dd><p>Suppress all progress reports.</p></dd>
<dt>--aggressive</dt><dd><p>Optimize the project <code>harder</code> at the expense of much more time.</p></dd>
<dt>--keep-largest</dt><dd><p>Consolidate every archive except the largest into a single bundle.</p></dd>
<dt>--max-size=&lt;n&gt;</dt><dd><p>Limit each bundle to n megabytes. The default value is 512.</p></dd>
</dl>
<h2>CONFIGURATION</h2>
<dl>
<dt>tidy.autoLimit</dt><dd><p>Run tidy-up automatically when more than this many loose files exist.
The default value is 6700.</p></dd>
<dt>tidy.writeBitmaps</dt><dd><p>Write a reachability bitmap beside each bundle. Defaults to true.</p></dd>
</dl>
<div class="navfooter">Prev Up Home Next</div>
</body></html>
"""

_SETTINGS = """## Settings

### SESSION_COOKIE_AGE

Default: 1209600 (2 weeks, in seconds)

The age of session cookies, in seconds.

### SESSION_COOKIE_NAME

Default: 'sessionid'

The name of the cookie to use for sessions.

### CSRF_COOKIE_HTTPONLY

Default: False

Whether to use the HttpOnly flag on the CSRF cookie.
"""

_NOTES = """Our office opens at eight and the kitchen is cleaned on Fridays. Visitors sign in at the desk.
The server room is on the second floor; only the on-call engineer holds its key.
"""


@pytest.fixture(scope="module")
def manual(tmp_path_factory: pytest.TempPathFactory) -> Path:
    docs = tmp_path_factory.mktemp("manual")
    (docs / "tidy-up.html").write_text(_PAGE, encoding="utf-8")
    (docs / "settings.md").write_text(_SETTINGS, encoding="utf-8")
    (docs / "office.txt").write_text(_NOTES, encoding="utf-8")  # plain notes: no title, no definition
    return docs


@pytest.mark.unit
def test_a_manuals_set_asks_its_users_questions_with_answers_on_their_pages(manual: Path, tmp_path: Path) -> None:
    make_testset([manual], tmp_path / "set", size=24, seed=0, makers=["manual_question"])
    rows = [
        json.loads(line)
        for name in ("queries.jsonl", "train_queries.jsonl")
        for line in (tmp_path / "set" / name).read_text(encoding="utf-8").splitlines()
    ]
    corpus = {
        r["id"]: r["text"]
        for r in map(json.loads, (tmp_path / "set" / "corpus.jsonl").read_text(encoding="utf-8").splitlines())
    }
    kinds = {r["kind"] for r in rows}
    assert kinds == {"default", "which", "how", "what"}, kinds
    by_text = {r["text"].lower(): r for r in rows}
    for r in rows:
        assert r["answers"] and any(a.lower() in corpus[r["gold"][0]].lower() for a in r["answers"]), r
        assert "prev" not in r["text"].lower().split() and "synopsis" not in r["text"].lower(), r
        assert not r["gold"][0].startswith("office"), r  # plain notes define nothing
    defaults = {r["answers"][0] for r in rows if r["kind"] == "default"}
    assert defaults <= {"2 weeks", "512", "6700", "true", "1209600", "sessionid", "False"}, defaults
    which = [r for r in rows if r["kind"] in ("which", "how") and "-q" in r["answers"]]
    for r in which:  # an option with two names: either is right
        assert r["answers"] == ["-q", "--quiet"], r
    asked = " ".join(by_text)
    assert "which" in asked and "how do i" in asked and "default" in asked
    assert any(r["text"] == r["text"].lower() for r in rows) and any(r["text"] != r["text"].lower() for r in rows)


@pytest.mark.unit
def test_a_maker_asked_for_alone_fills_the_set(manual: Path, tmp_path: Path) -> None:
    result = make_testset([manual], tmp_path / "set", size=8, seed=0, makers=["manual_question"])
    assert sum(c.get("kept", 0) for c in result.counts.values()) == 8, result.counts  # not its corpus share of 8


@pytest.mark.unit
def test_the_maker_takes_the_share_of_passages_that_define_something(manual: Path, tmp_path: Path) -> None:
    from modular_rag.eval.testset.corpus import read_passages
    from operators.questions_manual import defined_share, definitions

    passages, _, _ = read_passages([manual])
    shares = {p.id: bool(definitions(p.text)) for p in passages.passages}
    assert shares == {"office": False, "settings": True, "tidy-up": True}, shares
    assert defined_share(passages) == pytest.approx(2 / 3)
    terms = [d.term for p in passages.passages for d in definitions(p.text)]
    assert "NAME" not in terms and "OPTIONS" not in terms and "Settings" not in terms  # sections, not settings
    assert {"--prune=<date>", "-q, --quiet", "tidy.autoLimit", "SESSION_COOKIE_AGE"} <= set(terms), terms


@pytest.mark.unit
def test_right_judges_only_questions_an_answer_can_be_judged_by(tmp_path: Path) -> None:
    queries = [Query("a", "What does --quiet do?", ("suppress",)), Query("b", "a sentence of a passage, reworded")]
    dataset = BeirDataset(tmp_path, "dev", queries, {"a": {"doc1": 1}, "b": {"doc2": 1}})

    def record(qid: str, contains: float) -> QueryRecord:
        return QueryRecord(
            qid, "Suppress.", False, 0, 0, ["doc1"], 0, 0, 0, 1, 1.0, None, contains, [{"doc_id": "doc1"}]
        )

    assert answered_right(dataset, [record("a", 1.0), record("b", 0.0)]) == 1.0  # b has no answer to judge
