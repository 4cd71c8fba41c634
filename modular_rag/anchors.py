"""Link anchors: what one chunk defines (the names of what it is about), from the chunk alone (its text and
metadata), so a link table (:mod:`modular_rag.links`) can be built from any documents, and the anchors computed when
a chunk is indexed.

A chunk *defines*, by rank:

3. what it is about: a title someone wrote (a BEIR ``title``, front matter, the first Markdown heading), without a
   trailing parenthesis ("Kiss and Tell (1945 film)" -> "Kiss and Tell") or a leading "The"; front matter
   ``aliases`` (an option, never a need); its Markdown headings (every level); codes in those ("E07" in "E-bike
   display error E07", "TP-4410", "TW-E1"); and, when there is no such title or the subject extends it ("Shirley
   Temple Black (born 1928) was" under "Shirley Temple"), the subject its first sentence (or a section's) defines:
   "X is a/an/the ...", "X was ...", "X means ...", "X (born ...) is", "X, a ...", a quoted opening ("\"Feel Good
   Inc\" is a song"), with its other names: either side of "X or Y", without a title or a suffix ("Captain Henry
   Hall", "Viglen Ltd"), what it is "known as", and a person's first and last name, first two names and nickname
   with last name ("Shirley Temple", "Terry Richardson");
2. what it names as its subject without being about it: a title that is only the file name ("display error e07"),
   the subject of a titled chunk whose title does not name it ("Tara Strong is ..." under "Tara Strong
   filmography"), codes in a subject, and the names in the parenthesis after it ("(formerly named Bell Labs)");
1. weaker evidence: terms in bold (``**term**``), a name the first sentence only opens with ("John Newcombe defeated
   Ken Rosewall ..."), a person's other given names with the last name and middle initials ("Evelyn Waugh", "Roger
   O. Egeberg").

Names that a title or a sentence only contains ("Kent County Cricket Club" in "Kent County Cricket Club in 2010")
are not anchors of the chunk: it is about something else, and mentioning them is what a link follows.

Anchors are folded word tuples (lower case, accents stripped, split on non-word characters): "TW-550 Gravel" is
``("tw", "550", "gravel")``, so a mention matches in any letter case.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from modular_rag.anchor_words import CLAUSE, CONNECTORS, DATES, GENERATIONS, HONORIFICS, OPENERS, SUFFIXES

__all__ = ["ABOUT", "DEFINED", "NAMED", "Alias", "aliases_of", "chunk_anchors", "words_of"]

_WORD = re.compile(r"\w+", re.UNICODE)
ABOUT, NAMED, DEFINED = 3, 2, 1
"""The ranks of what a chunk defines (see the module docstring)."""

_KNOWN_AS = re.compile(
    r"\bknown (?:professionally |simply |mononymously |commonly )?as ([A-Z0-9][\w.'&-]*"
    r"(?:\s+(?:of\s+|the\s+|and\s+|de\s+)?[A-Z0-9][\w.'&-]*)*)"
)
_COPULA = re.compile(
    r"\s(?:is|was|are|were|means|meant|refers to|stands for|denotes|has been|had been|became|remains)"
    r"\s",
    re.IGNORECASE,
)
_APPOSITIVE = re.compile(r",\s+(?:a|an|the)\s", re.IGNORECASE)
_PARENTHESIS = re.compile(r"\s*\([^()]*\)")
_TRAILING_PARENTHESIS = re.compile(r"\s*\([^)]*\)\s*$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_BOLD = re.compile(r"\*\*([^*\n]{2,80}?)\*\*|__([^_\n]{2,80}?)__")
_CODE = re.compile(r"^(?=[^ ]*\d)(?=[^ ]*[A-Z])[A-Za-z0-9]+(?:[-/.][A-Za-z0-9]+)*$")
_QUOTES = "\"'“”‘’«»"
_PUNCT = _QUOTES + ",.;:!?()[]{}*_"
_OPENING_MARKS = _QUOTES + "("
_PERSON = re.compile(r"\bborn\b|\b\d{3,4}\b", re.IGNORECASE)

Alias = tuple[str, ...]


@lru_cache(maxsize=1)
def _combining() -> dict[int, None]:
    """The combining marks of the Basic Multilingual Plane, for ``str.translate`` to delete."""
    return {c: None for c in range(0x10000) if unicodedata.combining(chr(c))}


def folded(text: str) -> str:
    """``text`` in lower case with its accents stripped, the string :func:`words_of` cuts into words."""
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text).translate(_combining())
    return text.lower()


def words_of(text: str) -> list[str]:
    """The folded words of ``text``: lower case, accents stripped (``Ivo Andrić`` -> ``ivo``, ``andric``)."""
    return _WORD.findall(folded(text))


def phrase_pattern(anchor: str) -> re.Pattern[str]:
    """What finds an anchor (folded words joined by spaces) in a :func:`folded` text exactly where the text's
    :func:`words_of` hold its words in a row: each word whole, only non-word characters between them. Testing a text
    for a phrase this way does not cut it into words (an add tests tens of thousands of older chunks for new titles)."""
    return re.compile(r"(?<!\w)" + r"\W+".join(re.escape(w) for w in anchor.split()) + r"(?!\w)")


def _alias(name: str) -> Alias:
    return tuple(words_of(name))


def aliases_of(title: str, extra: Sequence[str] = ()) -> set[Alias]:
    """A title's aliases as folded word tuples: the title, without a trailing parenthesis, either without a leading
    "The" (or "A", "An"), and ``extra`` names."""
    out: set[Alias] = set()
    for name in (title, _TRAILING_PARENTHESIS.sub("", title).strip(), *extra):
        words = _alias(name)
        if words:
            out.add(words)
            if len(words) > 1 and words[0] in ("the", "a", "an"):
                out.add(words[1:])
    return out


def _is_code(word: str) -> bool:
    """A word of letters and digits with a capital letter: "E07", "TW-E1", "TP-4410", "A5117"."""
    return not word.isalpha() and bool(_CODE.match(word))


def _names(text: str, *, sentence_start: bool = True) -> list[str]:
    """The names in ``text``: codes, and runs of capitalised words (numbers and connectors such as "of" or "and"
    inside them) of two words or more; a capitalised word that only opens the sentence is not a name."""
    out: list[str] = []
    run: list[str] = []

    def close() -> None:
        if not run:
            return
        while run and (run[-1].lower() in CONNECTORS):
            run.pop()
        words = [w.lower() for w in run if not w.isdigit()]
        if DATES.issuperset(words) or (len(words) == 1 and words[0] in OPENERS):
            run.clear()
        while run and run[0].isdigit():  # "2022 Coastline Design Award" is also "Coastline Design Award"
            if len(run) > 2:
                out.append(" ".join(run))
            run.pop(0)
        if len(run) >= 2:
            out.append(" ".join(run))
            parts = " ".join(run).split(" and ")  # "Bell Telephone Laboratories and Bell Labs"
            out.extend(p for p in parts if len(parts) > 1 and " " in p)
        run.clear()

    for n, raw in enumerate(text.split()):
        word = raw.strip(_PUNCT)
        if not word:
            close()
            continue
        if word[0].isupper() or word[0].isdigit():
            if raw[0] in _OPENING_MARKS:
                close()
            if _is_code(word):
                out.append(word)
            if n == 0 and sentence_start and word.lower() in OPENERS:
                continue
            run.append(word)
        elif run and word in CONNECTORS and raw[-1] not in _PUNCT:  # "Kiss and Tell"
            run.append(word)
        else:
            close()
        if raw[-1] in _PUNCT:
            close()
    close()
    return out


def _subject(line: str) -> tuple[str, str, bool] | None:
    """The subject an opening sentence names, the parenthesis that follows it ("" if none), and whether the sentence
    defines it: a quoted opening ("\"Feel Good Inc\" is a song"), the words before "is/was/means ..." (parentheses
    and a ", which ...," clause left out) or before ", a/an/the ..." define it; a name that only opens the sentence
    ("The TW-550 Gravel went on sale ...", "John Newcombe defeated Ken Rosewall ...") does not."""
    head = line.strip()[:400]
    if head[:1] in _QUOTES:
        quoted = re.match(rf"[{_QUOTES}]([^{_QUOTES}]{{2,120}})[{_QUOTES}]", head)
        return (quoted.group(1), "", True) if quoted else None
    opening = re.match(r"[^()]{1,80}?\(([^()]*)\)", head)
    plain = re.sub(r"^(?:The|A|An)\s+", "", _PARENTHESIS.sub("", head))
    candidates: list[tuple[str, bool]] = []
    copula = _COPULA.search(plain[:240])
    if copula:  # "X, which ..., was", or "Released in 2023, the X is"
        parts = [p.strip() for p in plain[: copula.start()].split(",")]
        last = re.sub(r"^(?:the|a|an)\s+", "", parts[-1], flags=re.IGNORECASE)
        named = len(parts) > 1 and _names(last, sentence_start=False)[-1:] == [last]
        candidates.append((last if named and _names(parts[0])[-1:] != [parts[0]] else parts[0], True))
    appositive = _APPOSITIVE.search(plain[:160])
    if appositive:
        candidates.append((plain[: appositive.start()], True))
    opening_names = sorted((n for n in _names(plain[:160]) if plain.startswith(n)), key=len)
    if opening_names:  # "George Paice born 1941 in Fox Bay is ..." is about George Paice
        name = opening_names[-1]
        defined = any(found.strip(_PUNCT + " ") == name for found, _ in candidates)
        if not candidates or len(candidates[0][0].split()) > len(name.split()) + 2:
            candidates.insert(0, (name, defined))
        else:
            candidates.append((name, defined))
    for found, defined in candidates:
        words = found.strip(_PUNCT + " ").split()
        opener = bool(words) and words[0].lower() in OPENERS and (len(words) == 1 or not words[1][:1].isupper())
        clause = any(w.lower() in CLAUSE for w in words)  # "The jury gave the award to X, which is ..."
        if 0 < len(words) <= 10 and not opener and not clause:
            return " ".join(words), opening.group(1) if opening else "", defined
    return None


def _person_names(words: list[str], nick: list[str]) -> dict[str, int]:
    """Other names of a person's full name, with their rank: first and last name, the first two names ("Shirley
    Temple Black" -> "Shirley Temple") and the nickname with the last name ("Terry Richardson") rank 3; another given
    name with the last ("Arthur Evelyn St John Waugh" -> "Evelyn Waugh") and middle initials ("Roger O. Egeberg",
    "H. L. Mencken") rank 1."""
    names = [w for w in words if w[:1].isupper()]
    if len(names) < 2:
        return {}
    given, last = names[:-1], names[-1]
    out = {f"{names[0]} {last}": ABOUT, f"{names[0]} {names[1]}": ABOUT}
    if nick:
        out |= {f"{' '.join(nick)} {last}": ABOUT, f"{nick[-1]} {last}": ABOUT}
    for g in given[1:4]:
        out.setdefault(f"{g} {last}", DEFINED)
    if len(given) > 1:
        out.setdefault(f"{given[0]} {' '.join(g[0] for g in given[1:])} {last}", DEFINED)
        out.setdefault(f"{' '.join(g[0] for g in given)} {last}", DEFINED)
    return out


def _opening(line: str) -> dict[str, int]:
    """What an opening sentence defines, with ranks: its subject (:func:`_subject`) and the other names of it: either
    side of "X or Y", the subject without a title or a suffix ("Captain Henry Hall", "Viglen Ltd"), a person's other
    names (:func:`_person_names`) and what it is "known as" (rank 3 when the sentence defines the subject, 1 when a
    name only opens it); the names in the parenthesis after it ("(formerly named Bell Labs)") rank 2."""
    found = _subject(line)
    if found is None:
        return {}
    subject, parenthesis, defined = found
    rank = ABOUT if defined else DEFINED
    out = {subject: rank}
    alternatives = [n.strip(_PUNCT + " ") for n in subject.split(" or ")] if " or " in subject else []
    for name in [subject, *alternatives]:
        words = name.replace("\u201c", '"').replace("\u201d", '"').split()
        while len(words) > 1 and words[-1].lower().strip(_PUNCT) in SUFFIXES:  # "Viglen Ltd", not "Henry III"
            if len(words) == 2 and words[-1].lower().strip(_PUNCT) in GENERATIONS:
                break
            words.pop()
        while len(words) > 2 and words[0].lower().strip(_PUNCT) in HONORIFICS:
            words.pop(0)
        plain = [w.strip(_PUNCT) for w in words if w[0] not in _QUOTES]
        nick = [w.strip(_QUOTES) for w in words if w[0] in _QUOTES or w[-1] in _QUOTES]
        variants = {" ".join(words): rank, " ".join(plain): rank}
        if _PERSON.search(parenthesis) or nick:
            variants = {v: min(r, rank) for v, r in _person_names(plain, nick).items()} | variants
        for variant, r in variants.items():
            out.setdefault(variant, r)
    for name in _names(parenthesis, sentence_start=False):
        out.setdefault(name, min(NAMED, rank))
    known = _KNOWN_AS.search(line[:300])
    if known:
        out.setdefault(known.group(1), rank)
    return out


def _first_sentences(text: str, title: str, opens_document: bool) -> list[str]:
    """The opening lines whose first sentence defines a subject: the body's first line (when the chunk opens its
    document) and the first line after each Markdown heading."""
    lines = text.splitlines()
    if title and lines and lines[0].strip() == title:  # the title a chunker put first, on its own line
        lines = lines[1:]
    out: list[str] = []
    expect = opens_document
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if _HEADING.match(line):
            expect = True
            continue
        if expect:
            out.append(stripped)
            expect = False
    return out


def _file_name(title: str, metadata: Mapping[str, Any]) -> bool:
    """Whether ``title`` is only the chunk's file name (``display-error-e07.txt`` -> "display error e07")."""
    path = str(metadata.get("path") or metadata.get("source") or "")
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return bool(stem) and words_of(stem) == words_of(title)


def chunk_anchors(text: str, metadata: Mapping[str, Any]) -> dict[Alias, int]:
    """What one chunk defines: each anchor (folded word tuple) with its rank (3: the chunk is about it; 2: it names
    it as its subject without being about it; 1: weaker evidence, such as a bold term; see the module docstring). A
    function of the chunk alone, so it can be computed when the chunk is indexed.

    Args:
        text: The chunk text.
        metadata: Its metadata: ``title``, optional ``aliases`` (a comma-separated string or a list) and
            ``position`` (the chunk's place in its document; the first sentence of a later chunk defines nothing).

    Returns:
        Anchor -> rank, the highest rank when an anchor comes from several places.
    """
    out: dict[Alias, int] = {}

    def add(name: str, rank: int) -> None:
        alias = _alias(name)
        if alias and out.get(alias, 0) < rank:
            out[alias] = rank

    def about(name: str, *, rank: int = ABOUT, heading: bool = True) -> None:
        for alias in aliases_of(name):
            if out.get(alias, 0) < rank:
                out[alias] = rank
        for word in name.split():  # a code in a title names what the chunk is about ("Brake pad part TP-4410")
            code = word.strip(_PUNCT)
            if _is_code(code):
                add(code, rank if heading else min(rank, NAMED))

    title = str(metadata.get("title") or "").strip()
    written = bool(title) and not _file_name(title, metadata)  # a title someone wrote, not the file's name
    if title:
        about(title, rank=ABOUT if written else NAMED)
    extra = metadata.get("aliases") or ()
    for name in [a.strip() for a in extra.split(",")] if isinstance(extra, str) else [str(a) for a in extra]:
        if name:
            about(name)
    headings = [h.strip().strip("*_ ") for h in _HEADING.findall(text)]
    for heading in headings:
        about(heading)
    named = [_alias(h) for h in ([title] if written else []) + headings]
    opens = int(metadata.get("position") or 0) == 0
    for line in _first_sentences(text, title, opens):
        names = _opening(line)
        subject = _alias(next(iter(names), ""))
        agrees = any(subject[: len(t)] == t for t in named if subject and t)  # "Shirley Temple Black" for "Shirley
        # Temple"; not "Tara Strong" for "Tara Strong filmography", nor "Charlotte Hornets" for "List of ..."
        for name, rank in names.items():
            if agrees and rank in (ABOUT, DEFINED):  # the subject is what the title names
                about(name, heading=False)
            elif named:  # a titled chunk is about its title: another subject is only named
                add(name, min(rank, NAMED))
            elif rank == ABOUT:
                about(name, heading=False)
            else:
                add(name, rank)
    for bold in _BOLD.finditer(text):
        add(bold.group(1) or bold.group(2), DEFINED)
    return out
