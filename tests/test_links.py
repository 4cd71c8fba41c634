"""The link table: the anchors the indexed chunks define (titles, headings, the subjects their first sentences define,
names and codes), the mentions of them in chunk texts in any letter case, the document graph, kept in agreement
with the index across re-indexing."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from modular_rag.config import ChromaConfig, ProvidersConfig
from modular_rag.links import LinkTable, aliases_of, chunk_anchors
from modular_rag.providers import Providers
from modular_rag.registry import Port, get_operator

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
    assert [a for a, _ in links.mentions("the TW-550 Gravel and the TW-550")] == [
        ("tw", "550", "gravel"),
        ("tw", "550"),
    ]


@pytest.mark.unit
def test_an_alias_too_many_chunks_mention_is_not_followed() -> None:
    texts = [f"Army unit {i} served in Texas." for i in range(5)] + ["The Army is a land force."]
    metas = [{"doc_id": f"d{i}", "title": f"Unit {i}"} for i in range(5)] + [{"doc_id": "army", "title": "Army"}]
    assert all(not o for o in LinkTable.build(texts, metas, max_mentions=3).outlinks[:5])
    assert all(o == {5} for o in LinkTable.build(texts, metas, max_mentions=10).outlinks[:5])


@pytest.mark.integration
def test_the_index_writes_its_link_rows_with_each_add_and_removal(tmp_path: Path) -> None:
    """No table is rebuilt: a document added later is found from the chunks that mentioned it before (their rows are
    scanned again), a reopened index reads the same rows, and a removed document's anchors and mentions go."""
    from modular_rag.ingest import index_paths

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "award.md").write_text("---\ntitle: Award 2022\n---\n\nThe TW-550 Gravel won the Coastline award.\n")
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"))))
    index_paths([docs], env, progress=False)
    award = next(iter(env.index.catalog.ids()))
    assert env.index.links.outlinks([award]) == {award: []}  # nothing the award names is indexed yet
    (docs / "spec.md").write_text(
        "---\ntitle: TW-550 Gravel specification sheet\n---\n\nThe TW-550 Gravel has a chromoly steel frame.\n"
    )
    index_paths([docs], env, progress=False)
    spec = next(c for c in env.index.catalog.ids() if c != award)
    assert env.index.links.outlinks([award]) == {award: [spec]}  # the older chunk was scanned again
    reopened = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"))))
    assert reopened.index.links.outlinks([award]) == {award: [spec]}
    assert spec in reopened.index.links.named_in("which frame does the tw-550 gravel have")
    (docs / "spec.md").unlink()
    index_paths([docs], env, progress=False, sync=True)
    assert env.index.links.outlinks([award]) == {award: []}
    assert spec not in env.index.links.named_in("which frame does the tw-550 gravel have")


@pytest.mark.integration
def test_the_stored_link_table_equals_a_build_over_every_chunk(tmp_path: Path) -> None:
    """The demo corpus indexed one file at a time (each add scanning only its own chunks and the older chunks that
    mention anchors it brings) links exactly as a table built over all the chunks at once."""
    from modular_rag import demo_corpus_path
    from modular_rag.ingest import index_paths

    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"))))
    for file in sorted(demo_corpus_path().glob("*.md"), reverse=True):
        index_paths([file], env, progress=False)
    held = [c for part in env.index.catalog.scan() for c in part]
    built = LinkTable.build([c.text for c in held], [c.metadata for c in held])
    stored = env.index.links.outlinks([c.id for c in held])
    assert {(held[i].id, held[j].id) for i, out in enumerate(built.outlinks) for j in out} == {
        (a, b) for a, out in stored.items() for b in out
    }
    questions = [
        q["text"]
        for q in map(__import__("json").loads, (demo_corpus_path().parent / "questions.jsonl").read_text().splitlines())
    ]
    for q in questions:
        assert {held[p].id for p in built.named_in(q)} == env.index.links.named_in(q), q


def _chunks(folder: Path) -> tuple[list[str], list[dict]]:
    """The chunk texts and metadata indexing ``folder`` makes (the loaders and the default recursive chunker)."""
    from modular_rag.ingest import iter_files, load_file
    from operators.indexing import SizeParams

    chunker = get_operator(Port.CHUNK, "recursive").factory(SizeParams(), Providers())
    texts, metas = [], []
    for path, root, _ in iter_files([folder]):
        for doc in load_file(path, root, Providers())[0]:
            for chunk in chunker(doc):
                texts.append(chunk["text"])
                metas.append(dict(chunk["metadata"]))
    return texts, metas


def _graph(links: LinkTable, metas: list[dict]) -> set[tuple[str, str]]:
    return {(metas[i]["doc_id"], metas[j]["doc_id"]) for i, out in enumerate(links.outlinks) for j in out}


@pytest.mark.unit
def test_a_chunk_defines_its_title_headings_first_sentence_subject_and_codes_and_only_mentions_the_rest() -> None:
    text = (
        "TW-550 Gravel specification sheet\nThe TW-550 Gravel went on sale in 2021. It fits the TP-4420 pads.\n\n"
        "## Frame and fork\nThe frame is **chromoly steel**, built in Kestrel Harbour."
    )
    anchors = chunk_anchors(text, {"title": "TW-550 Gravel specification sheet"})
    defines = {" ".join(a): rank for a, rank in anchors.items()}
    assert defines["tw 550 gravel specification sheet"] == 3 and defines["frame and fork"] == 3  # title, heading
    assert defines["tw 550"] == 3  # a code in the title
    assert defines["tw 550 gravel"] == 1 and defines["chromoly steel"] == 1  # the name the text opens with; bold
    assert "tp 4420" not in defines and "kestrel harbour" not in defines  # only mentioned
    person = chunk_anchors('Terrence "Uncle Terry" Richardson (born August 14, 1965) is an American photographer.', {})
    assert {("terrence", "uncle", "terry", "richardson"), ("terry", "richardson"), ("terrence", "richardson")} <= set(
        person
    )
    for sentence, subject in [
        ("Meet Corliss Archer, a program from radio's Golden Age, ran from 1943 to 1956.", "meet corliss archer"),
        ("Error E07 means speed sensor signal lost.", "error e07"),
        ('"Feel Good Inc" is a song by Gorillaz.', "feel good inc"),
        ("Viglen Ltd provides IT products and services.", "viglen ltd"),
    ]:
        assert chunk_anchors(sentence, {}).get(tuple(subject.split())) in (1, 3), sentence
    assert ("viglen",) in chunk_anchors("Viglen Ltd is a computer maker.", {})  # without the company suffix


@pytest.mark.unit
def test_a_lowercase_question_names_the_same_chunks_as_its_cased_form() -> None:
    links = LinkTable.build(TEXTS, METAS)
    for question in ("Which film starred the actress from Kiss and Tell?", "What frame does the TW-550 Gravel have?"):
        assert links.named_in(question)
        assert links.named_in(question.lower()) == links.named_in(question), question


@pytest.mark.integration
def test_plain_txt_files_without_titles_link_through_the_subjects_they_define(tmp_path: Path) -> None:
    from modular_rag.ingest import index_paths

    docs = tmp_path / "notes"
    docs.mkdir()
    (docs / "harbour-notes.txt").write_text(
        "Kestrel Harbour is a former shipbuilding town on the coast, where every Tidewater frame is welded.\n"
    )
    (docs / "spec.txt").write_text("The TW-550 Gravel is a steel gravel bike with room for 50 mm tyres.\n")
    (docs / "news_2022.txt").write_text(
        "The jury gave this year's design award to the tw-550 gravel, which is built in Kestrel Harbour.\n"
    )
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"))))
    index_paths([docs], env, progress=False)
    held = {c.id: c for part in env.index.catalog.scan() for c in part}
    graph = {(held[a].doc_id, held[b].doc_id) for a, out in env.index.links.outlinks(list(held)).items() for b in out}
    assert graph == {("news_2022", "harbour-notes"), ("news_2022", "spec")}
    assert sorted(str(c.metadata["title"]) for c in held.values()) == ["harbour notes", "news 2022", "spec"]


@pytest.mark.unit
def test_a_heading_many_documents_share_does_not_link_them(tmp_path: Path) -> None:
    for n in range(8):
        (tmp_path / f"manual-{n}.md").write_text(
            f"# Overview\n\nThe TX-{n} is a bike. Read the Overview first.\n\n"
            "## Safety\n\nCheck the brakes before each ride.\n"
        )
    (tmp_path / "recall.md").write_text("# Recall notice\n\nThe TX-3 brakes are being replaced; see Safety.\n")
    texts, metas = _chunks(tmp_path)
    links = LinkTable.build(texts, metas)
    assert _graph(links, metas) == {("recall", "manual-3")}  # by its code, not through "Overview" or "Safety"
    assert {"overview", "safety"} <= set(links._dropped)


@pytest.mark.unit
def test_the_demo_corpus_without_aliases_links_its_multi_hop_pairs(tmp_path: Path) -> None:
    from modular_rag import demo_corpus_path

    for file in demo_corpus_path().glob("*.md"):
        lines = file.read_text(encoding="utf-8").splitlines(keepends=True)
        (tmp_path / file.name).write_text("".join(ln for ln in lines if not ln.startswith("aliases:")))
    texts, metas = _chunks(tmp_path)
    assert not any("aliases" in m for m in metas)
    graph = _graph(LinkTable.build(texts, metas), metas)
    assert {
        ("coastline-design-award-2022", "tw-550-gravel-spec-sheet"),
        ("display-error-e21", "tw-e2-cargo-manual"),
        ("tp-4410-brake-pads", "tw-e1-ebike-manual"),
    } <= graph


@pytest.mark.unit
def test_html_headings_stay_in_the_text_as_markdown_headings(tmp_path: Path) -> None:
    pytest.importorskip("bs4", reason="the docs extra (scripts/setup.sh installs it)")
    from modular_rag.ingest import load_file

    (tmp_path / "brake-service.html").write_text(
        "<html><body><main><h2>Pad wear</h2><p>Replace the pads.</p></main></body></html>"
    )
    doc = load_file(tmp_path / "brake-service.html", tmp_path, Providers())[0][0]
    assert doc["metadata"]["title"] == "brake service" and "## Pad wear" in doc["text"].splitlines()


@pytest.mark.unit
def test_anchors_computed_per_chunk_beforehand_build_the_same_table() -> None:
    built = LinkTable.build(TEXTS, METAS)
    given = LinkTable.build(TEXTS, METAS, anchors=[chunk_anchors(t, m) for t, m in zip(TEXTS, METAS, strict=True)])
    assert (given.table, given.outlinks) == (built.table, built.outlinks)


@pytest.mark.integration
def test_the_link_scan_costs_what_the_words_cost_not_the_longest_title(tmp_path: Path) -> None:
    """A corpus with one 60-word title (SciFact's titles run to 40 words) made every text's spans of up to 60 words
    candidates of the scan: about 90 MB of strings for 20 chunks here, gigabytes for a SciFact write batch. The scan
    reads the anchors its words and word pairs start, so its peak stays under 4 MB; it still finds the long title."""
    import random
    import tracemalloc

    from modular_rag.state import Chunk

    rng = random.Random(0)
    vocabulary = [f"word{i}" for i in range(400)]
    title = " ".join(rng.choice(vocabulary) for _ in range(60))
    texts = [" ".join(rng.choice(vocabulary) for _ in range(200)) + "." for _ in range(20)]
    texts[5] += f" As {title} showed."
    chunks = [
        Chunk(chunk_id=f"c{i}", text=t, metadata={"doc_id": f"d{i}", "title": title if i == 0 else f"Paper {i}"})
        for i, t in enumerate(texts)
    ]
    env = Providers(ProvidersConfig(vectorstore=ChromaConfig(path=str(tmp_path / "index"))))
    env.index.add(chunks)
    held = [c for part in env.index.catalog.scan() for c in part]
    tracemalloc.start()
    try:
        with env.index.catalog.transaction() as db:
            env.index.links.rescan(db, [c.pos for c in held], [c.text for c in held])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000, f"the scan of 20 chunks peaked at {peak / 1e6:.1f} MB"
    first = held[0].id
    assert any(first in out for out in env.index.links.outlinks([c.id for c in held]).values())


@pytest.mark.unit
def test_a_phrase_is_found_in_a_text_exactly_where_its_words_run_in_a_row() -> None:
    # an add tests tens of thousands of older chunks for the titles it brings: by a pattern over the folded text,
    # which must agree with the words the link table is scanned by (words_of) on every text
    from modular_rag.anchors import folded, phrase_pattern, words_of

    rng = random.Random(7)
    pieces = [
        "Tidewater",
        "cycles",
        "ANDRIĆ",
        "andric",
        "e07",
        "E07",
        "x_1",
        "über",
        "uber",
        "Café",
        "cafe",
        "İstanbul",
        "a",
        "the",
        "42",
        "tide",
        "water",
    ]
    glue = [" ", "  ", "-", ", ", "\n", "'", "_", "", ". "]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) + rng.choice(glue) for _ in range(rng.randint(1, 8)))
        words = words_of(text)
        start = rng.randrange(len(words)) if words else 0
        anchor = " ".join(words[start : start + rng.randint(1, 3)]) or "tidewater"
        if rng.random() < 0.3:
            anchor = " ".join(words_of(" ".join(rng.sample(pieces, 2))))
        assert bool(phrase_pattern(anchor).search(folded(text))) == (f" {anchor} " in f" {' '.join(words)} "), (
            text,
            anchor,
        )
