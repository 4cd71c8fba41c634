"""Segmented BM25 postings on disk and the catalog beside them: the same results as an exhaustive scorer over the
live chunks, after adds, removals, merges and a compaction; a second reader sees a writer's changes; the catalog
reads by key."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from modular_rag.catalog import Catalog
from modular_rag.segments import SegmentedBM25, lucene_idf
from modular_rag.sparse import PostingsBM25

WORDS = [f"w{i}" for i in range(300)]


def _corpus(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(WORDS[: rng.randint(20, 300)]) for _ in range(rng.randint(3, 40))] for _ in range(n)]


def _stats(docs: list[list[str]]) -> tuple[dict[str, int], int, float]:
    df: dict[str, int] = {}
    for terms in docs:
        for t in set(terms):
            df[t] = df.get(t, 0) + 1
    return df, len(docs), sum(map(len, docs)) / len(docs)


def _agrees(seg: SegmentedBM25, live: dict[int, list[str]], queries: list[list[str]]) -> None:
    """Top 10 and scores equal to an exhaustive BM25 over the live chunks, for every query."""
    positions = sorted(live)
    docs = [live[p] for p in positions]
    ref = PostingsBM25.build(docs, idf="lucene")
    df, n, avgdl = _stats(docs)
    for q in queries:
        idf = {t: lucene_idf(df.get(t, 0), n) for t in q}
        want, want_scores = ref.top_k(q, 10)
        got, got_scores = seg.top_k(q, 10, idf, avgdl)
        np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5)
        assert [positions[i] for i in want] == got.tolist()
        np.testing.assert_allclose(seg.score(q, got.tolist(), idf, avgdl), got_scores, rtol=1e-5)
    # the chunks holding every term (an add's look-up of new anchors), one query at a time and many at once
    holding = [[p for p in positions if set(q[:n]) <= set(live[p])] for q in queries for n in (1, 2, 3)]
    assert [found.tolist() for found in seg.containing_many([q[:n] for q in queries for n in (1, 2, 3)])] == holding
    assert seg.containing(queries[0][:2]).tolist() == holding[1]


@pytest.mark.unit
def test_segments_score_like_an_exhaustive_bm25_through_adds_removals_merges_and_compaction(tmp_path: Path) -> None:
    corpus = _corpus(400, seed=0)
    queries = [random.Random(i).sample(WORDS[:60], 3) for i in range(40)]
    seg = SegmentedBM25(tmp_path / "bm25", max_segments=3, ratio=0)  # merges by the bound alone
    live: dict[int, list[str]] = {}
    for start in range(0, 400, 50):  # eight adds: merges keep at most three segments
        seg.add(start, corpus[start : start + 50])
        live.update({start + i: t for i, t in enumerate(corpus[start : start + 50])})
    assert len(seg.segments) == 3 and seg.next_position == 400
    _agrees(seg, live, queries)
    gone = random.Random(1).sample(sorted(live), 120)
    seg.remove(gone)
    for p in gone:
        del live[p]
    _agrees(seg, live, queries)
    seg.add(400, corpus[:30])  # the same texts again, at new positions
    live.update({400 + i: t for i, t in enumerate(corpus[:30])})
    _agrees(seg, live, queries)
    seg.compact()
    assert len(seg.segments) == 1 and not len(seg.removed)
    _agrees(seg, live, queries)
    with pytest.raises(ValueError, match="must be added at position 430"):
        seg.add(0, corpus[:1])


@pytest.mark.unit
def test_a_reader_sees_what_another_writer_added(tmp_path: Path) -> None:
    corpus = _corpus(60, seed=2)
    writer, reader = SegmentedBM25(tmp_path / "bm25"), SegmentedBM25(tmp_path / "bm25")
    writer.add(0, corpus[:30])
    assert reader.next_position == 30
    writer.add(30, corpus[30:])
    writer.remove([3])
    assert reader.next_position == 60 and reader.removed.tolist() == [3]
    first = [corpus[0][0]]
    got, _ = reader.top_k(first, 100, {first[0]: 1.0}, 10.0)
    assert 0 in got.tolist() and 3 not in got.tolist()


@pytest.mark.unit
def test_the_catalog_reads_chunks_statistics_and_fields_by_key(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog.sqlite")
    chunks = [
        ("c1", "d1", "Error E07 means speed sensor signal lost.", {"year": 2023, "source": "faq"}),
        ("c2", "d1", "Slide the magnet back.", {"year": 2023}),
        ("c3", "d2", "Frames are welded.", {"source": "blog"}),
    ]
    terms = [["error", "e07", "speed"], ["slide", "magnet"], ["frame", "weld"]]
    with catalog.transaction() as db:
        assert catalog.add_chunks(chunks, [3, 2, 2], terms, db) == [0, 1, 2]
    assert catalog.count() == 3 and catalog.stats() == (3, 7.0)
    assert catalog.get(["c3", "nope"])["c3"].metadata == {"source": "blog"}
    assert [c.id for c in catalog.at([2, 0])] == ["c3", "c1"]
    assert catalog.document_frequencies(["error", "weld", "absent"]) == {"error": 1, "weld": 1, "absent": 0}
    assert catalog.metadata_fields() == {"year": {int}, "source": {str}}
    with catalog.transaction() as db:
        catalog.set_anchors([("e07", 0, 3)], db)
        catalog.set_mentions([(1, 0, "e07", True)], db)
        catalog.remove_chunks([0], [terms[0]], db)
    assert catalog.count() == 2 and catalog.stats() == (2, 4.0)
    assert catalog.document_frequencies(["error"]) == {"error": 0}
    assert catalog.definers(["e07"]) == {} and catalog.mentioned_by([1]) == {1: [(0, "e07")]}
    assert catalog.metadata_fields() == {"year": {int}, "source": {str}}
    with catalog.transaction() as db:
        assert catalog.add_chunks([("c4", "d3", "New.", {})], [1], [["new"]], db) == [3]  # positions are not reused
    other = Catalog(tmp_path / "catalog.sqlite")  # another process's view of the same file
    assert sorted(other.ids()) == ["c2", "c3", "c4"]


@pytest.mark.unit
def test_chunks_added_after_the_newest_ones_were_removed_are_searchable(tmp_path: Path) -> None:
    """A sync that removes the newest file and an add after it: the new chunks must get fresh positions (a position
    of a removed chunk is a tombstone in the postings) and be found by BM25."""
    from modular_rag.config import ChromaConfig, ProvidersConfig
    from modular_rag.providers import Providers
    from modular_rag.state import Chunk

    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"))))
    first = [
        Chunk(chunk_id=f"a{i}", text=f"Alpha note {i} about gears.", metadata={"doc_id": f"a{i}"}) for i in range(4)
    ]
    env.index.add(first)
    env.index.remove(["a2", "a3"])  # the newest positions
    env.index.add([Chunk(chunk_id="b0", text="The zeppelin hangar opened.", metadata={"doc_id": "b0"})])
    assert [h["chunk_id"] for h in env.index.search_sparse("zeppelin hangar", 3)] == ["b0"]
    assert sorted(env.index.catalog.positions(["a0", "a1", "b0"]).values()) == [0, 1, 4]


@pytest.mark.unit
def test_a_workers_first_question_reads_no_table_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new worker's first BM25 query reads statistics and postings by key: counting the chunks table (0.7 s at 1M
    chunks) is not part of it; the count is the statistic the writes keep."""
    from modular_rag.config import ChromaConfig, ProvidersConfig
    from modular_rag.providers import Providers
    from modular_rag.state import Chunk

    config = ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index")))
    Providers(config).index.add(
        [
            Chunk(chunk_id=f"c{i}", text=f"Note {i} about gears and chains.", metadata={"doc_id": f"c{i}"})
            for i in range(5)
        ]
    )
    statements: list[str] = []
    read = Catalog._read

    def recorded(self: Catalog, sql: str, *args: object, **kwargs: object) -> object:
        statements.append(sql)
        return read(self, sql, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Catalog, "_read", recorded)
    worker = Providers(config)._build_index()  # a new process's index: nothing of it opened yet
    assert [h["chunk_id"] for h in worker.search_sparse("gears note 3", 1)] == ["c3"]
    assert worker.count() == 5
    assert statements and not [s for s in statements if "COUNT(*)" in s.upper()], statements


@pytest.mark.unit
def test_small_adds_to_a_large_index_rewrite_what_they_add_not_its_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # at 1M chunks in 12 segments, each add of 1,000 documents merged its new segment with a ~50k-chunk neighbour
    # (the pair with the fewest postings): 2.7 s of the add. Merges now carry like a counter in base 4
    import modular_rag.segments as segments

    rewritten: list[int] = []
    merge = segments._merge
    monkeypatch.setattr(
        segments,
        "_merge",
        lambda folder, parts, removed: (
            rewritten.append(sum(p.end - p.start for p in parts)) or merge(folder, parts, removed)
        ),
    )
    corpus = _corpus(2600, seed=3)
    seg = SegmentedBM25(tmp_path / "bm25")
    for start in range(0, 2400, 200):  # the bulk build: twelve adds of 200
        seg.add(start, corpus[start : start + 200])
    rewritten.clear()
    for start in range(2400, 2600, 5):  # then forty small adds of 5 chunks
        seg.add(start, corpus[start : start + 5])
    assert sum(rewritten) <= 40 * 5 * 10, rewritten  # each added chunk rewritten a few times (12,000 before)
    live = {p: corpus[p] for p in range(2600)}
    _agrees(seg, live, [random.Random(i).sample(WORDS[:60], 3) for i in range(20)])
