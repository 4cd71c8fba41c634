"""The link table: titles and aliases of the indexed chunks, the mentions of them in chunk texts, the document graph,
kept in agreement with the index across re-indexing."""

from __future__ import annotations

from pathlib import Path

import pytest

from modular_rag.config import ChromaConfig, ProvidersConfig
from modular_rag.links import LinkTable, aliases_of
from modular_rag.providers import Providers

TEXTS = [
    "Kiss and Tell is a 1945 film starring Shirley Temple.",
    "Shirley Temple was an American actress and diplomat.",
    "The Tidewater TW-550 Gravel won an award; the TW-550 is built in Kestrel Harbour.",
    "TW-550 Gravel specification sheet. Its frame is chromoly steel.",
]
METAS = [
    {"doc_id": "kiss", "title": "Kiss and Tell (1945 film)"},
    {"doc_id": "temple", "title": "Shirley Temple"},
    {"doc_id": "award", "title": "TW-550 Gravel wins the award"},
    {"doc_id": "spec", "title": "TW-550 Gravel specification sheet", "aliases": "TW-550 Gravel, TW-550"},
]


@pytest.mark.unit
def test_aliases_drop_a_trailing_parenthesis_and_a_leading_the() -> None:
    assert aliases_of("Kiss and Tell (1945 film)") == {("kiss", "and", "tell", "1945", "film"), ("kiss", "and", "tell")}
    assert ("beatles",) in aliases_of("The Beatles")


@pytest.mark.unit
def test_mentions_follow_titles_and_aliases_longest_first_never_to_their_own_document() -> None:
    links = LinkTable.build(TEXTS, METAS)
    assert links.outlinks[0] == {1}  # Kiss and Tell -> Shirley Temple
    assert links.outlinks[2] == {3}  # "TW-550 Gravel" and "TW-550" are the spec sheet's aliases
    assert links.outlinks[3] == frozenset()  # the spec sheet names only itself
    assert links.named_in("Which film starred the actress from Kiss and Tell?") == {0}
    assert [a for a, _ in links.mentions("the TW-550 Gravel and the TW-550")] == [("tw", "550", "gravel"),
                                                                                ("tw", "550")]  # fmt: skip


@pytest.mark.unit
def test_an_alias_too_many_chunks_mention_is_not_followed() -> None:
    texts = [f"Army unit {i} served in Texas." for i in range(5)] + ["The Army is a land force."]
    metas = [{"doc_id": f"d{i}", "title": f"Unit {i}"} for i in range(5)] + [{"doc_id": "army", "title": "Army"}]
    assert all(not o for o in LinkTable.build(texts, metas, max_mentions=3).outlinks[:5])
    assert all(o == {5} for o in LinkTable.build(texts, metas, max_mentions=10).outlinks[:5])


@pytest.mark.integration
def test_the_link_table_is_saved_beside_the_index_and_follows_re_indexing(tmp_path: Path) -> None:
    from operators.indexing import index_paths

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "award.md").write_text("---\ntitle: Award 2022\n---\n\nThe TW-550 Gravel won the Coastline award.\n")
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"))))
    index_paths([docs], env, progress=False)
    assert not any(env.index.links.outlinks)  # nothing the award names is indexed yet
    saved = list((tmp_path / "index").glob("*.links.json"))
    assert len(saved) == 1
    (docs / "spec.md").write_text("---\ntitle: TW-550 Gravel specification sheet\naliases: TW-550 Gravel\n---\n\n"
                                  "Its frame is chromoly steel.\n")  # fmt: skip
    index_paths([docs], env, progress=False)
    links = env.index.links  # the chunks changed: the table is rebuilt, and saved again
    award = next(i for i, m in enumerate(env.index.sparse.metadatas) if m["doc_id"] == "award")
    spec = next(i for i, m in enumerate(env.index.sparse.metadatas) if m["doc_id"] == "spec")
    assert links.outlinks[award] == {spec}
    reopened = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"))))
    assert reopened.index.links.outlinks[award] == {spec}  # loaded from beside the index, same digest
    assert LinkTable.load(saved[0]) is not None and LinkTable.load(saved[0]).digest == links.digest  # type: ignore[union-attr]
