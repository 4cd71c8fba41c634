"""Sentence vectors made once: each chunk's content sentences are embedded when it is indexed and read back by chunk
id, so a question embeds only itself; an index written before them, or by another encoder, still answers and gets
them at its next index run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modular_rag.builder import build_flow
from modular_rag.config import ProvidersConfig, load_config
from modular_rag.index import ChromaStore, KnowledgeIndex
from modular_rag.providers import Providers
from modular_rag.sentences import SETTING, chunk_sentences
from modular_rag.state import Chunk
from modular_rag.text import Analyzer
from tests.conftest import QUESTIONS, providers_config

CHUNKS = [
    Chunk(
        chunk_id="a",
        text="# Brakes\nThe TP-4410 pads fit the front caliper. Replace them every 2,000 km of riding.",
        metadata={"doc_id": "brakes", "title": "Brakes"},
    ),
    Chunk(
        chunk_id="b",
        text="Error E07 means speed sensor signal lost. Check the magnet on the rear wheel. Ok.",
        metadata={"doc_id": "errors"},
    ),
]


def _index(folder: Path, identity: str | None = "minilm/fp32") -> KnowledgeIndex:
    """A fresh index object over ``folder`` (what a new process opens), with the bundled encoder."""
    encoder = Providers(ProvidersConfig()).encoder
    store = ChromaStore(path=str(folder), collection="sentences")
    return KnowledgeIndex(
        store, encoder, folder=folder / "sentences.kit", analyzer=Analyzer(), encoder_identity=identity
    )


@pytest.mark.integration
def test_a_new_question_embeds_only_itself(demo_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm process answering the demo questions with the default template sends the encoder each question and no
    other text (before: the sentences of its top chunks, 29 to 40 texts for a question about unseen chunks)."""
    from modular_rag import template_path
    from modular_rag.attribution import scoring as attribution

    config = load_config(template_path("linear"))
    config.providers = providers_config(demo_dir)
    env = Providers(config.providers)
    flow = build_flow(config, providers=env)
    flow.invoke({"query": "How long does the battery take to charge?"})  # warm: models loaded, index opened
    attribution._SENTENCE_VECTORS.clear()  # sentences other tests embedded in this process: these are unseen
    encoder = env.encoder
    sent: list[str] = []
    real = encoder.encode
    monkeypatch.setattr(encoder, "encode", lambda texts: (sent.extend(texts), real(texts))[1])
    questions = [json.loads(line)["text"] for line in QUESTIONS.read_text().splitlines() if line.strip()]
    for question in questions:
        encoder.clear_cache()
        sent.clear()
        flow.invoke({"query": question})
        assert sent == [question], f"{question!r} embedded {len(sent)} texts: {sent[:3]}"


@pytest.mark.integration
def test_stored_vectors_give_the_answers_embedding_at_query_time_gives(demo_dir: Path) -> None:
    from modular_rag import template_path

    config = load_config(template_path("linear"))
    config.providers = providers_config(demo_dir)
    env = Providers(config.providers)
    flow = build_flow(config, providers=env)
    questions = [json.loads(line)["text"] for line in QUESTIONS.read_text().splitlines() if line.strip()]
    stored = [flow.invoke({"query": q})["answer"]["text"] for q in questions]
    env.index.sentences.use_stored = False
    try:
        embedded = [flow.invoke({"query": q})["answer"]["text"] for q in questions]
    finally:
        env.index.sentences.use_stored = True
    assert stored == embedded


@pytest.mark.integration
def test_sentences_are_stored_with_their_chunk_and_removed_with_it(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.add(CHUNKS)
    found = index.sentence_vectors(["a", "b", "missing"])
    assert set(found) == {"a", "b"}
    for chunk in CHUNKS:  # the splitter the scorer uses, on the stored metadata
        sentences = chunk_sentences(chunk["text"], chunk["metadata"])
        assert list(found[chunk["chunk_id"]]) == sentences
        fresh = index.encoder.encode(sentences)
        stored = np.vstack(list(found[chunk["chunk_id"]].values()))
        assert np.allclose(np.sum(stored * fresh, axis=1), 1.0, atol=1e-5)
    assert "Brakes" not in found["a"] and "Ok." not in found["b"]  # a heading, a sentence of one term
    index.remove(["a"])
    assert set(index.sentence_vectors(["a", "b"])) == {"b"}
    rows = sqlite3.connect(index.folder / "catalog.sqlite").execute("SELECT COUNT(*) FROM sentences").fetchone()[0]
    assert rows == 1


def _as_schema_2(catalog: Path) -> None:
    """Turn a catalog into what schema 2 wrote: no sentences table, no encoder setting."""
    db = sqlite3.connect(catalog)
    db.execute("DROP TABLE sentences")
    db.execute(f"DELETE FROM settings WHERE key = '{SETTING}'")
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()


@pytest.mark.integration
def test_an_index_written_before_sentence_vectors_answers_and_gets_them_at_its_next_index_run(tmp_path: Path) -> None:
    _index(tmp_path).add(CHUNKS)
    _as_schema_2(tmp_path / "sentences.kit" / "catalog.sqlite")
    reopened = _index(tmp_path)
    assert reopened.sentence_vectors(["a", "b"]) == {}  # nothing stored: the scorer embeds what it reads
    assert reopened.count() == 2
    report = reopened.add(CHUNKS[:1])  # the next index run: nothing new, the missing sentence vectors are made
    assert report.added == 0 and report.stages["sentence vectors"] > 0
    assert set(reopened.sentence_vectors(["a", "b"])) == {"a", "b"}
    db = sqlite3.connect(tmp_path / "sentences.kit" / "catalog.sqlite")
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3


@pytest.mark.integration
def test_another_encoders_sentence_vectors_are_not_used_and_are_replaced_at_the_next_index_run(
    tmp_path: Path, caplog: Any
) -> None:
    _index(tmp_path, identity="minilm/int8").add(CHUNKS)
    other = _index(tmp_path)  # the same folder opened with another encoder identity
    assert other.sentence_vectors(["a"]) == {}
    assert "were made by minilm/int8" in caplog.text
    other.add([])
    assert set(other.sentence_vectors(["a", "b"])) == {"a", "b"}
    assert other.catalog.setting(SETTING) == "minilm/fp32"


@pytest.mark.integration
def test_compression_reads_the_stored_sentence_vectors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Extractive compression embeds only what the index does not store for the chunk (its heading), and keeps the
    sentences it kept when it embedded them all."""
    from modular_rag.config import ChromaConfig
    from operators.post_retrieval import compress_text

    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path), collection="compress")))
    env.index.add(CHUNKS)
    query = env.encoder.encode_query("How often should the brake pads be replaced?")
    text = CHUNKS[0]["text"]
    whole = compress_text(env, query, text, 1)  # no chunk id: every sentence embedded now
    sent: list[str] = []
    real = env.encoder.encode
    monkeypatch.setattr(env.encoder, "encode", lambda texts: (sent.extend(texts), real(texts))[1])
    assert compress_text(env, query, text, 1, chunk_id="a") == whole
    assert sent == ["# Brakes The TP-4410 pads fit the front caliper."]  # the heading's line, which is not stored


@pytest.mark.integration
def test_an_index_run_that_brings_nothing_new_still_makes_the_missing_sentence_vectors(tmp_path: Path) -> None:
    from modular_rag.config import ChromaConfig, MiniLMConfig
    from modular_rag.ingest import index_paths
    from tests.conftest import DEMO

    store = ChromaConfig(path=str(tmp_path), collection="rerun")
    files = sorted(DEMO.glob("display-error-*.md"))
    first = Providers(ProvidersConfig(vectorstore=store))
    index_paths(files, first, progress=False, sync=True)
    ids = list(first.index.catalog.ids())
    _as_schema_2(tmp_path / "rerun.kit" / "catalog.sqlite")
    # another process (a fresh index object over the same folder; the batch size changes no vector)
    later = Providers(ProvidersConfig(vectorstore=store, embeddings=MiniLMConfig(batch_size=32)))
    assert later.index.sentence_vectors(ids) == {}
    summary = index_paths(files, later, progress=False, sync=True)
    assert summary.added == 0 and set(later.index.sentence_vectors(ids)) == set(ids)
