"""Indexing: loaders, chunkers, content ids, the run summary, dense and sparse written together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modular_rag.config import ChromaConfig, OperatorSpec, ProvidersConfig, load_config
from modular_rag.errors import ConfigError, IndexingError
from modular_rag.providers import Providers
from modular_rag.registry import Port, get_operator
from operators.indexing import Document, chunk_id, index_paths, iter_files, load_file
from tests.conftest import DEMO


def chunker(name: str, **params: object):
    info = get_operator(Port.CHUNK, name)
    return info.factory(info.params.model_validate(params), None)


DOC = Document(doc_id="d", text="First paragraph here. It has two sentences.\n\nSecond paragraph. Short.",
               metadata={"title": "T"})  # fmt: skip


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
    assert [c["text"] for c in win] == ["First paragraph here.", "It has two sentences.", "Second paragraph.",
                                        "Short."]  # fmt: skip
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
    rows = ['{"id": "1", "title": "a", "text": "alpha"}', "{broken", '{"id": "1", "text": "dup"}',
            '{"id": "2", "text": ""}', '{"_id": "3", "text": "gamma"}']  # fmt: skip
    (tmp_path / "c.jsonl").write_text("\n".join(rows))
    env = Providers()
    reports = {p.name: load_file(p, tmp_path, env) for p, _ in iter_files([tmp_path])}
    assert reports["empty.txt"][1].skipped == "empty file"
    assert "binary" in reports["bin.txt"][1].skipped
    assert "unsupported file type '.png'" in reports["img.png"][1].skipped
    docs, rep = reports["latin.txt"]
    assert docs[0]["text"] == "café au lait" and "not UTF-8" in rep.notes[0]
    docs, rep = reports["c.jsonl"]
    assert [d["doc_id"] for d in docs] == ["1", "3"]
    assert rep.notes == ["1 broken lines skipped", "1 duplicate ids skipped (first kept)",
                         "1 rows with empty text skipped"]  # fmt: skip


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
    assert env.index.count() == first.chunks == len(env.index.sparse.ids)
    assert sorted(env.index.sparse.ids) == env.index.sparse.ids


@pytest.mark.integration
def test_stale_sparse_index_is_rebuilt_from_the_dense_store(tmp_path: Path) -> None:
    cfg = ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path), collection="stale"))
    env = Providers(cfg)
    index_paths([DEMO / "display-error-e07.md"], env, progress=False)
    sparse_file = env.index.sparse_file
    assert sparse_file is not None and sparse_file.exists()
    saved = sparse_file.read_bytes()
    index_paths([DEMO / "display-error-e12.md"], env, progress=False)
    sparse_file.write_bytes(saved)  # as if killed between the dense write and the sparse write
    from modular_rag.index import KnowledgeIndex

    fresh = KnowledgeIndex(env.index.dense, env.encoder, sparse_file=sparse_file, analyzer=env.index.analyzer)
    assert len(fresh.sparse.ids) == fresh.count() == 2
    assert fresh.search_sparse("E12 battery", 1)[0]["metadata"]["doc_id"] == "display-error-e12"


@pytest.mark.unit
def test_missing_path_and_bad_chunker_params(tmp_path: Path) -> None:
    with pytest.raises(IndexingError, match="no such file"):
        list(iter_files([tmp_path / "nope"]))
    with pytest.raises(ConfigError, match="indexing.chunker.params.chunk_size"):
        index_paths([tmp_path], Providers(), chunker=OperatorSpec(name="fixed", params={"chunk_size": -1}))
    assert load_config({"pattern": "linear", "indexing": {"chunker": "sentence_window"}})


@pytest.mark.unit
def test_summary_counts_reconcile(tmp_path: Path) -> None:
    from operators.indexing import IndexSummary

    summary = IndexSummary(3, 2, 1, 2, 4, 4, 0, 0.1, [], 4)
    assert summary.files_read == summary.files_indexed + summary.files_skipped
    assert "3 read, 2 indexed, 1 skipped" in summary.lines()[0]
    json.dumps(summary.__dict__, default=str)


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
    assert first.synced == {"added": 3, "replaced": 0, "unchanged": 0, "removed": 0}
    assert "Warranty" in {str(m["title"]) for m in env.index.sparse.metadatas}

    _write(docs, "edit.md", "Chain", "Wax the chain every 500 km; wipe it after rain.")
    (docs / "gone.md").unlink()
    _write(docs, "new.md", "Tyres", "Inflate the tyres to 3.5 bar for commuting.")
    second = index_paths([docs], env, progress=False, sync=True)
    assert second.synced == {"added": 1, "replaced": 1, "unchanged": 1, "removed": 1}
    assert second.removed == 2 and second.added == 2  # gone.md's chunk and edit.md's old one; edit.md and new.md
    assert second.files_read == second.files_indexed + second.files_skipped == 3
    assert any("removed gone.md" in line for line in second.lines())
    # dense, sparse and link table agree, and nothing of the deleted or old text is left in either channel
    assert env.index.count() == len(env.index.sparse.ids) == 3
    assert {str(m["title"]) for m in env.index.sparse.metadatas} == {"Saddle", "Chain", "Tyres"}
    assert all("warranty" not in h["text"].lower() for h in env.index.search_sparse("frame warranty years", 5))
    assert all("warranty" not in h["text"].lower() for h in env.index.search_dense("frame warranty years", 5))
    assert all("300 km" not in h["text"] for h in env.index.search_dense("oil the chain", 5))
    assert len(env.index.links.documents) == 3 and env.index.links.digest == env.index.sparse.digest

    third = index_paths([docs], env, progress=False, sync=True)  # nothing changed: nothing embedded or removed
    assert third.synced == {"added": 0, "replaced": 0, "unchanged": 3, "removed": 0}
    assert third.added == third.removed == 0 and third.stages["embed"] == 0.0


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
def test_adding_and_pruning_update_the_sparse_index_without_reading_every_chunk_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    from modular_rag.index import ChromaStore, KnowledgeIndex, SparseIndex
    from modular_rag.sparse import PostingsBM25
    from modular_rag.state import Chunk
    from modular_rag.text import Analyzer

    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("display-error-e07.md", "display-error-e12.md", "chain-lubrication-guide.md", "company-history.md"):
        (docs / name).write_text((DEMO / name).read_text())
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"), collection="incremental")))
    index_paths([docs], env, progress=False, sync=True)
    assert env.index.sparse_file is not None
    before = set(env.index.sparse.ids)

    (docs / "company-history.md").unlink()
    _write(docs, "chain-lubrication-guide.md", "Chain", "Wax the chain every 500 km; wipe it after rain.")
    for name in ("display-error-e03.md", "battery-recycling-policy.md"):
        (docs / name).write_text((DEMO / name).read_text())

    def no_dump(self: ChromaStore) -> None:
        raise AssertionError("the incremental path must not read every chunk back from the dense store")

    analysed: list[str] = []
    many = Analyzer.many

    def counted(self: Analyzer, texts: list[str]) -> list[list[str]]:
        analysed.extend(texts)
        return many(self, texts)

    monkeypatch.setattr(ChromaStore, "dump", no_dump)
    monkeypatch.setattr(Analyzer, "many", counted)
    summary = index_paths([docs], env, progress=False, sync=True)
    assert summary.synced == {"added": 2, "replaced": 1, "unchanged": 2, "removed": 1}
    assert summary.added > 0 and summary.removed > 0
    got = env.index.sparse
    added = [t for cid, t in zip(got.ids, got.texts, strict=True) if cid not in before]
    assert len(added) == summary.added and sorted(analysed) == sorted(added)  # only the added chunks were analysed

    # an index with nothing in memory updates the saved file the same way
    reopened = KnowledgeIndex(env.index.dense, env.encoder, sparse_file=env.index.sparse_file, analyzer=Analyzer())
    extra = Chunk(chunk_id="zz-extra", text="Tyres: inflate them to 3.5 bar.", metadata={"title": "Tyres"})
    report = reopened.add([extra])
    assert report.sparse_path == "incremental" and set(report.sparse_stages) == {"analyse", "merge", "save"}
    monkeypatch.undo()

    full = KnowledgeIndex(env.index.dense, None, sparse_file=None, analyzer=Analyzer()).rebuild_sparse()
    for index in (reopened.sparse, SparseIndex.load(env.index.sparse_file)):
        assert index.ids == full.ids == sorted(full.ids) and index.digest == full.digest
        assert index.texts == full.texts and index.metadatas == full.metadatas
        a, b = index.scorer, full.scorer
        assert isinstance(a, PostingsBM25) and isinstance(b, PostingsBM25) and a.vocab == b.vocab
        assert np.array_equal(a.indices, b.indices) and np.allclose(a.data, b.data, rtol=1e-6, atol=0)
        for query in ("E03 display error", "wax chain rain", "battery recycling", "company founded", "tyres bar"):
            assert index.search(query, 5) == full.search(query, 5)
    assert not any("300 km" in t or "history" in str(m.get("path")) for t, m in zip(full.texts, full.metadatas,
                                                                                     strict=True))  # fmt: skip
    assert reopened.links.digest == full.digest and len(reopened.links.documents) == len(full.ids)


@pytest.mark.unit
def test_a_markdown_heading_of_the_title_is_not_repeated_in_the_chunk(tmp_path: Path) -> None:
    (tmp_path / "saddle.md").write_text("# Saddle height\n\nSet it so the knee is slightly bent.\n", encoding="utf-8")
    docs, _ = load_file(tmp_path / "saddle.md", tmp_path, Providers())
    for name in ("recursive", "fixed", "document"):
        text = chunker(name)(docs[0])[0]["text"]
        assert text.count("Saddle height") == 1 and text.startswith("Saddle height"), (name, text)
    other = Document(doc_id="d", text="## Fitting\nSet it so the knee is slightly bent.", metadata={"title": "Saddle"})
    assert chunker("document")(other)[0]["text"] == "Saddle\n## Fitting\nSet it so the knee is slightly bent."
