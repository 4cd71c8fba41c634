"""Indexing: loaders, chunkers, content ids, the run summary, dense and sparse written together."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modular_rag.config import ChromaConfig, OperatorSpec, ProvidersConfig, load_config
from modular_rag.errors import ConfigError, IndexingError
from modular_rag.ingest import Document, chunk_id, index_paths, iter_files, load_file
from modular_rag.providers import Providers
from modular_rag.registry import Port, get_operator
from tests.conftest import DEMO


def chunker(name: str, **params: object):
    info = get_operator(Port.CHUNK, name)
    return info.factory(info.params.model_validate(params), None)


DOC = Document(
    doc_id="d", text="First paragraph here. It has two sentences.\n\nSecond paragraph. Short.", metadata={"title": "T"}
)


@pytest.mark.unit
def test_chunk_ids_derive_from_content() -> None:
    assert chunk_id("a", "text") == chunk_id("a", "text")
    assert chunk_id("a", "text") != chunk_id("b", "text") != chunk_id("a", "text2")


@pytest.mark.unit
def test_chunkers_split_and_attach_metadata() -> None:
    rec = chunker("recursive", chunk_size=40, chunk_overlap=0)(DOC)
    assert len(rec) >= 2 and all(c["text"].startswith("T\n") for c in rec)
    assert [c["metadata"]["position"] for c in rec] == list(range(len(rec)))
    assert all(c["metadata"]["doc_id"] == "d" and c["metadata"]["title"] == "T" for c in rec)
    fixed = chunker("fixed", chunk_size=30, chunk_overlap=10, prepend_title=False)(DOC)
    assert all(len(c["text"]) <= 30 for c in fixed)
    assert fixed[0]["text"].split()[-1] in fixed[1]["text"]  # overlap carries words over
    win = chunker("sentence_window", window=1)(DOC)
    assert [c["text"] for c in win] == ["First paragraph here.", "It has two sentences.", "Second paragraph.", "Short."]
    assert win[1]["metadata"]["window"] == "First paragraph here. It has two sentences. Second paragraph."
    whole = chunker("document")(DOC)
    assert len(whole) == 1 and whole[0]["chunk_id"] == chunk_id("d", whole[0]["text"])


@pytest.mark.unit
def test_markdown_front_matter_becomes_metadata() -> None:
    path = DEMO / "warranty-policy-2019.md"
    docs, report = load_file(path, DEMO, Providers())
    assert report.skipped is None and len(docs) == 1
    meta = docs[0]["metadata"]
    assert meta["year"] == 2019 and meta["source"] == "policy" and meta["path"] == "warranty-policy-2019.md"
    assert docs[0]["doc_id"] == "warranty-policy-2019"
    assert not docs[0]["text"].startswith("---")


@pytest.mark.unit
def test_bad_files_are_skipped_with_reasons(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "bin.txt").write_bytes(b"\x00\x01\x02abc")
    (tmp_path / "latin.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (tmp_path / "img.png").write_bytes(b"\x89PNG")
    rows = [
        '{"id": "1", "title": "a", "text": "alpha"}',
        "{broken",
        '{"id": "1", "text": "dup"}',
        '{"id": "2", "text": ""}',
        '{"_id": "3", "text": "gamma"}',
    ]
    (tmp_path / "c.jsonl").write_text("\n".join(rows))
    env = Providers()
    reports = {p.name: load_file(p, tmp_path, env) for p, _, _ in iter_files([tmp_path])}
    assert reports["empty.txt"][1].skipped == "empty file"
    assert "binary" in reports["bin.txt"][1].skipped
    assert "unsupported file type '.png'" in reports["img.png"][1].skipped
    docs, rep = reports["latin.txt"]
    assert docs[0]["text"] == "café au lait" and "not UTF-8" in rep.notes[0]
    docs, rep = reports["c.jsonl"]
    assert [d["doc_id"] for d in docs] == ["1", "3"]
    assert rep.notes == [
        "1 line skipped: not JSON (Expecting property name enclosed in double quotes) (line 2)",
        "1 line skipped: duplicate id (the first kept) (line 3)",
        "1 line skipped: empty text (line 4)",
    ]


@pytest.mark.integration
def test_indexing_the_same_folder_twice_gives_the_same_counts(tmp_path: Path) -> None:
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path), collection="twice")))
    chunker = OperatorSpec(name="recursive", params={"chunk_size": 400})
    first = index_paths([DEMO], env, chunker=chunker, progress=False)
    second = index_paths([DEMO], env, chunker=chunker, progress=False)
    assert first.files_read == second.files_read == 36
    assert first.files_read == first.files_indexed + first.files_skipped
    assert first.chunks == second.chunks > 36  # 400-character chunks split the documents
    assert first.added == first.chunks and second.added == 0 and second.existing == first.chunks
    assert env.index.count() == first.chunks == env.index.catalog.count() == env.index.dense.count()
    assert env.index.postings is not None and env.index.postings.next_position == first.chunks  # written once


@pytest.mark.integration
def test_a_run_killed_between_writes_is_completed_by_the_next(tmp_path: Path) -> None:
    """Writes go catalog, dense store, postings: a run killed after the catalog (or after the dense store) leaves
    chunks the next run completes, embedding only what the dense store lacks."""
    from modular_rag.index import KnowledgeIndex

    cfg = ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path), collection="stale"))
    env = Providers(cfg)
    index_paths([DEMO / "display-error-e07.md"], env, progress=False)
    docs, _ = load_file(DEMO / "display-error-e12.md", DEMO, env)
    chunks = [c for d in docs for c in chunker("recursive")(d)]
    env.index._catalog_add(chunks)  # killed after the catalog write: no vectors, no postings
    assert env.index.catalog.count() == 2 and env.index.dense.count() == 1
    assert env.index.search_sparse("E12 battery overtemperature", 1) == []  # no postings for it yet
    fresh = KnowledgeIndex(env.index.dense, env.encoder, folder=env.index.folder, analyzer=env.index.analyzer)
    report = fresh.add(chunks)
    assert report.added == len(chunks) and fresh.dense.count() == fresh.count() == 2
    assert fresh.search_sparse("E12 battery", 1)[0]["metadata"]["doc_id"] == "display-error-e12"


@pytest.mark.integration
def test_an_add_of_new_chunks_asks_the_store_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each add asked the dense store to count everything it holds and which of the chunks it holds (on Milvus Lite
    at 1M chunks, 1.6 s a batch; a --sync over 1M chunks spent hours there): only chunks the catalog already has can
    be in the store (the catalog is written first), so only those are looked up."""
    cfg = ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path), collection="asks"))
    env = Providers(cfg)
    index_paths([DEMO / "display-error-e07.md"], env, progress=False)
    store = type(env.index.dense)
    with monkeypatch.context() as m:
        m.setattr(store, "count", lambda self: pytest.fail("the add counted the store"))
        m.setattr(
            store,
            "existing",
            lambda self, ids: pytest.fail(f"the add looked up {len(ids)} new chunks") if ids else set(),
        )
        summary = index_paths([DEMO / "display-error-e12.md"], env, progress=False)
    assert summary.added and env.index.dense.count() == env.index.catalog.count()


@pytest.mark.unit
def test_missing_path_and_bad_chunker_params(tmp_path: Path) -> None:
    with pytest.raises(IndexingError, match="no such file"):
        list(iter_files([tmp_path / "nope"]))
    with pytest.raises(ConfigError, match="indexing.chunker.params.chunk_size"):
        index_paths([tmp_path], Providers(), chunker=OperatorSpec(name="fixed", params={"chunk_size": -1}))
    assert load_config({"pattern": "linear", "indexing": {"chunker": "sentence_window"}})


@pytest.mark.unit
def test_summary_counts_reconcile(tmp_path: Path) -> None:
    from modular_rag.ingest import IndexSummary

    summary = IndexSummary(3, 2, 1, 2, 4, 4, 0, 0.1, [], 4)
    assert summary.files_read == summary.files_indexed + summary.files_skipped
    assert "3 read, 2 indexed, 1 skipped" in summary.lines()[0]
    json.dumps(summary.__dict__, default=str)


def _titles(env: Providers) -> set[str]:
    return {str(c.metadata["title"]) for part in env.index.catalog.scan() for c in part}


def _write(folder: Path, name: str, title: str, body: str) -> None:
    (folder / name).write_text(f"---\ntitle: {title}\n---\n{body}\n", encoding="utf-8")


@pytest.mark.integration
def test_sync_makes_the_index_follow_its_sources(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    _write(docs, "keep.md", "Saddle", "Set the saddle height so the knee is slightly bent at the bottom.")
    _write(docs, "edit.md", "Chain", "Oil the chain every 300 km with a dry lubricant.")
    _write(docs, "gone.md", "Warranty", "The frame warranty lasts seven years from the date of purchase.")
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"), collection="sync")))
    first = index_paths([docs], env, progress=False, sync=True)
    assert first.synced == {"added": 3, "replaced": 0, "unchanged": 0, "completed": 0, "removed": 0}
    assert "Warranty" in _titles(env)
    assert env.index.links.named_in("what does the warranty cover")  # the title is an anchor

    _write(docs, "edit.md", "Chain", "Wax the chain every 500 km; wipe it after rain.")
    (docs / "gone.md").unlink()
    _write(docs, "new.md", "Tyres", "Inflate the tyres to 3.5 bar for commuting.")
    second = index_paths([docs], env, progress=False, sync=True)
    assert second.synced == {"added": 1, "replaced": 1, "unchanged": 1, "completed": 0, "removed": 1}
    assert second.removed == 2 and second.added == 2  # gone.md's chunk and edit.md's old one; edit.md and new.md
    assert second.files_read == second.files_indexed + second.files_skipped == 3
    assert any("removed gone.md" in line for line in second.lines())
    # dense, sparse and link table agree, and nothing of the deleted or old text is left in either channel
    assert env.index.count() == env.index.dense.count() == 3
    assert _titles(env) == {"Saddle", "Chain", "Tyres"}
    assert all("warranty" not in h["text"].lower() for h in env.index.search_sparse("frame warranty years", 5))
    assert all("warranty" not in h["text"].lower() for h in env.index.search_dense("frame warranty years", 5))
    assert all("300 km" not in h["text"] for h in env.index.search_dense("oil the chain", 5))
    assert not env.index.links.named_in("what does the warranty cover")  # the removed chunk's anchors went with it

    third = index_paths([docs], env, progress=False, sync=True)  # nothing changed: nothing embedded or removed
    assert third.synced == {"added": 0, "replaced": 0, "unchanged": 3, "completed": 0, "removed": 0}
    assert third.added == third.removed == 0 and third.stages.get("embed", 0.0) == 0.0


def _two_notes(tmp_path: Path, second: str, collection: str) -> tuple[Path, Providers]:
    """A folder of two notes (``keep.md`` and ``second``) and providers over an empty Chroma index of its own."""
    docs = tmp_path / "docs"
    docs.mkdir()
    _write(docs, "keep.md", "Saddle", "Set the saddle height so the knee is slightly bent at the bottom.")
    _write(docs, second, "Chain", "Oil the chain every 300 km with a dry lubricant.")
    return docs, Providers(
        ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"), collection=collection))
    )


@pytest.mark.integration
def test_a_sync_reads_only_the_files_that_changed_since_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import modular_rag.ingest.pipeline as indexing

    docs, env = _two_notes(tmp_path, "edit.md", "marks")
    index_paths([docs], env, progress=False, sync=True)
    read: list[str] = []
    stream = indexing.stream_file
    monkeypatch.setattr(
        indexing, "stream_file", lambda path, *a, **k: (read.append(path.name), stream(path, *a, **k))[1]
    )

    _write(docs, "edit.md", "Chain", "Wax the chain every 500 km; wipe it after rain.")
    second = index_paths([docs], env, progress=False, sync=True)
    assert read == ["edit.md"]  # keep.md is as the last sync left it: not read, its chunk stays
    assert second.synced == {"added": 0, "replaced": 1, "unchanged": 1, "completed": 0, "removed": 0}
    assert env.index.count() == 2 and any("Saddle" in t for t in _titles(env))

    # a run without sync reads a file and adds its new chunks beside the old: the next sync must read it again
    _write(docs, "keep.md", "Saddle", "Raise the saddle until the leg is almost straight.")
    index_paths([docs / "keep.md"], env, progress=False)
    _write(docs, "keep.md", "Saddle", "Set the saddle height so the knee is slightly bent at the bottom.")
    read.clear()
    third = index_paths([docs], env, progress=False, sync=True)
    assert read == ["keep.md"] and third.synced["replaced"] == 1
    assert env.index.count() == 2  # the chunk the unsynced run added is gone


@pytest.mark.integration
def test_a_sync_does_not_open_files_whose_size_and_time_are_as_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins
    import os

    docs, env = _two_notes(tmp_path, "touch.md", "stat")
    old = 1_600_000_000_000_000_000  # both files last written long before the mark is taken
    for f in docs.iterdir():
        os.utime(f, ns=(old, old))
    index_paths([docs], env, progress=False, sync=True)
    opened: list[str] = []
    real_open = builtins.open

    def watched(file: Any, *a: Any, **k: Any) -> Any:
        if str(file).startswith(str(docs)):
            opened.append(Path(file).name)
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", watched)
    second = index_paths([docs], env, progress=False, sync=True)
    assert opened == [] and second.synced["unchanged"] == 2  # a corpus of a million documents is not re-hashed
    os.utime(docs / "touch.md", ns=(old + 10**9, old + 10**9))  # touched, not changed: hashed, still unchanged
    third = index_paths([docs], env, progress=False, sync=True)
    assert opened == ["touch.md"] and third.synced == {
        "added": 0,
        "replaced": 0,
        "unchanged": 2,
        "completed": 0,
        "removed": 0,
    }
    opened.clear()
    assert index_paths([docs], env, progress=False, sync=True).synced["unchanged"] == 2 and opened == []  # renewed
    _write(docs, "touch.md", "Chain", "Oil the chain every 900 km with a dry lubricant.")  # same size, new time
    os.utime(docs / "touch.md", ns=(old + 2 * 10**9, old + 2 * 10**9))
    assert index_paths([docs], env, progress=False, sync=True).synced["replaced"] == 1


@pytest.mark.integration
def test_without_sync_an_edited_file_leaves_its_old_chunks(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    _write(docs, "edit.md", "Chain", "Oil the chain every 300 km with a dry lubricant.")
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"), collection="nosync")))
    index_paths([docs], env, progress=False)
    _write(docs, "edit.md", "Chain", "Wax the chain every 500 km; wipe it after rain.")
    again = index_paths([docs], env, progress=False)
    assert again.removed == 0 and not again.synced and env.index.count() == 2  # adding never deletes


@pytest.mark.integration
def test_adding_and_pruning_touch_only_what_changed_and_equal_a_fresh_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modular_rag.index import ChromaStore
    from modular_rag.text import Analyzer

    docs = tmp_path / "docs"
    docs.mkdir()
    for name in (
        "display-error-e07.md",
        "display-error-e12.md",
        "chain-lubrication-guide.md",
        "company-history.md",
        "tw-e1-ebike-manual.md",
    ):
        (docs / name).write_text((DEMO / name).read_text())
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"), collection="incremental")))
    index_paths([docs], env, progress=False, sync=True)
    before = set(env.index.catalog.ids())

    (docs / "company-history.md").unlink()
    _write(docs, "chain-lubrication-guide.md", "Chain", "Wax the chain every 500 km; wipe it after rain.")
    for name in ("display-error-e03.md", "battery-recycling-policy.md", "tp-4410-brake-pads.md"):
        (docs / name).write_text((DEMO / name).read_text())

    def no_dump(self: ChromaStore) -> None:
        raise AssertionError("an add must not read every chunk back from the dense store")

    analysed: list[str] = []
    call = Analyzer.__call__

    def counted(self: Analyzer, text: str) -> list[str]:
        analysed.append(text)
        return call(self, text)

    monkeypatch.setattr(ChromaStore, "dump", no_dump)
    monkeypatch.setattr(Analyzer, "__call__", counted)
    monkeypatch.setattr(Analyzer, "many", lambda self, texts: [counted(self, t) for t in texts])
    summary = index_paths([docs], env, progress=False, sync=True)
    monkeypatch.undo()
    assert summary.synced == {"added": 3, "replaced": 1, "unchanged": 3, "completed": 0, "removed": 1}
    now = set(env.index.catalog.ids())
    changed = {c.text for c in env.index.catalog.get(sorted(now - before)).values()}
    assert len(now - before) == summary.added and len(before - now) == summary.removed
    # the sentences of the new chunks are analysed too (their sentence vectors keep those with content terms)
    whole = [t for t in analysed if len(t) > 60 and not any(t in c and t != c for c in changed)]
    assert set(whole) <= changed | {t for t in whole if "300 km" in t or "founded" in t or "Founded" in t}
    assert len(whole) <= summary.added + summary.removed + 2  # + the queries below

    # a fresh index of the final documents reads the same: BM25, IDFs, links
    fresh = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "fresh"), collection="fresh")))
    index_paths([docs], fresh, progress=False)
    assert fresh.index.count() == env.index.count() and set(fresh.index.catalog.ids()) == now
    for query in ("E03 display error", "wax chain rain", "battery recycling", "company founded", "brake pads TW-E1"):
        assert [(h["chunk_id"], round(h["score"], 4)) for h in env.index.search_sparse(query, 5)] == [
            (h["chunk_id"], round(h["score"], 4)) for h in fresh.index.search_sparse(query, 5)
        ]
    terms = ["wax", "chain", "e03", "found", "tw"]
    assert env.index.idfs(terms) == fresh.index.idfs(terms)
    assert env.index.links.outlinks(sorted(now)) == fresh.index.links.outlinks(sorted(now))
    assert any(env.index.links.outlinks(sorted(now)).values())  # the brake pads' page links to the TW-E1 manual


@pytest.mark.unit
def test_a_markdown_heading_of_the_title_is_not_repeated_in_the_chunk(tmp_path: Path) -> None:
    (tmp_path / "saddle.md").write_text("# Saddle height\n\nSet it so the knee is slightly bent.\n", encoding="utf-8")
    docs, _ = load_file(tmp_path / "saddle.md", tmp_path, Providers())
    for name in ("recursive", "fixed", "document"):
        text = chunker(name)(docs[0])[0]["text"]
        assert text.count("Saddle height") == 1 and text.startswith("Saddle height"), (name, text)
    other = Document(doc_id="d", text="## Fitting\nSet it so the knee is slightly bent.", metadata={"title": "Saddle"})
    assert chunker("document")(other)[0]["text"] == "Saddle\n## Fitting\nSet it so the knee is slightly bent."


@pytest.mark.integration
def test_documents_are_read_and_written_as_a_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loader is consumed lazily: chunks are written every FLUSH_CHUNKS as they come, so what was read first is in
    the index before the loader has yielded the rest (memory bounded by a batch, whatever the corpus size)."""
    from langchain_core.document_loaders import BaseLoader
    from langchain_core.documents import Document as LCDocument

    import modular_rag.ingest.pipeline as indexing

    monkeypatch.setattr(indexing, "FLUSH_CHUNKS", 40)
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"), collection="stream")))
    held_when: list[int] = []

    class Notes(BaseLoader):
        def lazy_load(self):  # type: ignore[no-untyped-def]
            for i in range(120):
                held_when.append(env.index.count())
                yield LCDocument(
                    page_content=f"Note {i}: the part number is TP-{4000 + i}.", metadata={"source": f"notes/{i}.md"}
                )

    summary = indexing.index_documents(Notes(), env, chunker=OperatorSpec(name="document"), progress=False)
    assert summary.documents == summary.chunks == summary.added == 120 and env.index.count() == 120
    assert held_when[0] == 0 and held_when[40] == 40 and held_when[119] == 80  # written in batches as it read
    assert "Note 117:" in env.index.search_sparse("TP-4117", 1)[0]["text"]


@pytest.mark.integration
def test_a_json_lines_file_over_max_file_mb_is_streamed_not_refused(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    rows = [
        json.dumps({"id": f"r{i}", "title": f"Row {i}", "text": f"Row {i} says the code is E{i:02d}."})
        for i in range(60)
    ]
    (docs / "export.jsonl").write_text("\n".join(rows) + "\nnot json\n", encoding="utf-8")
    (docs / "big.txt").write_text("x " * 20_000, encoding="utf-8")
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"), collection="jsonl")))
    summary = index_paths([docs], env, max_file_mb=0.01, progress=False)
    by_path = {r.path: r for r in summary.files}
    assert by_path["export.jsonl"].skipped is None and by_path["export.jsonl"].documents == 60
    assert by_path["export.jsonl"].notes == ["1 line skipped: not JSON (Expecting value) (line 61)"]
    assert "larger than max_file_mb=0.01" in str(by_path["big.txt"].skipped)  # a format read whole keeps the cap
    assert env.index.count() == 60


@pytest.mark.integration
def test_the_first_writes_are_small_so_progress_shows_from_the_first_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modular_rag.ingest.pipeline import FIRST_FLUSH, FLUSH_CHUNKS

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(40):
        (docs / f"page{i:02d}.txt").write_text(" ".join(f"Sentence {i}.{j} about spoke tension." for j in range(40)))
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"), collection="ramp")))
    sizes: list[int] = []
    add = env.index.add

    def recorded(chunks: Any, **kwargs: Any) -> Any:  # the index's own add, its batch sizes noted
        sizes.append(len(chunks))
        return add(chunks, **kwargs)

    monkeypatch.setattr(env.index, "add", recorded)
    chunker = OperatorSpec(name="recursive", params={"chunk_size": 200, "chunk_overlap": 0})
    summary = index_paths([docs], env, chunker=chunker, progress=False)
    assert sizes[0] <= FIRST_FLUSH + 20 and sizes[1] <= 2 * FIRST_FLUSH + 20  # a file's chunks may overshoot
    assert sum(sizes) == summary.chunks and max(sizes) <= FLUSH_CHUNKS + 20
