"""Link anchors: what one chunk defines (the names of what it is about), from the chunk alone (its text and
metadata), so a link table (:mod:`modular_rag.links`) can be built from any documents, and the anchors computed when
a chunk is indexed.

A chunk *defines*, by rank:

3. what it is about: its ``title`` (a BEIR title, front matter, the first heading, or the file name made readable),
   the title without a trailing parenthesis ("Kiss and Tell (1945 film)" -> "Kiss and Tell") or a leading "The",
   its front matter ``aliases`` (an option, never a need), its Markdown headings (every level), and the subject its
   first sentence (or a section's) defines: "X is a/an/the ...", "X was ...", "X means ...", "X (born ...) is",
   "X, a ...", a quoted opening ("\"Feel Good Inc\" is a song"), or a name that opens it when the title or a
   heading agrees ("TW-550 Gravel specification sheet: The TW-550 Gravel went on sale ...");
2. other names of those: the capitalised multi-word names and codes inside them ("Kestrel Harbour" in "Inside the
   Kestrel Harbour factory", "E07", "TW-E1", "TP-4410"), either side of "X or Y", the subject without a title or a
   suffix ("Captain Henry Hall", "Viglen Ltd"), the names in the parenthesis after it and what it is "known as";
   for a person (a parenthesis with "born" or a year, or a quoted nickname) first and last name, the first two
   names and nickname + last name ("Shirley Temple Black (born 1928) was" -> "Shirley Temple");
1. weaker evidence: terms in bold (``**term**``), a name or code a later sentence defines ("TP-4420 is the ..."), a
   name that opens the first sentence without the title agreeing ("John Newcombe defeated Ken Rosewall ..."), a
   person's other given names with the last name and middle initials ("Evelyn Waugh", "Roger O. Egeberg").

Anchors are folded word tuples (lower case, accents stripped, split on non-word characters): "TW-550 Gravel" is
``("tw", "550", "gravel")``, so a mention matches in any letter case.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

__all__ = ["ABOUT", "DEFINED", "NAMED", "Alias", "aliases_of", "chunk_anchors", "words_of"]

_WORD = re.compile(r"\w+", re.UNICODE)
ABOUT, NAMED, DEFINED = 3, 2, 1
"""The ranks of what a chunk defines (see the module docstring)."""

# Words that open a sentence without naming its subject ("Since 2016, ..."), and what may join the words of a name.
_OPENERS = frozenset(
    ["a", "an", "the", "this", "that", "these", "those", "it", "its", "they", "their", "there", "here", "he", "his",
     "she", "her", "we", "our", "you", "your", "i", "my", "in", "on", "at", "since", "after", "before", "when",
     "while", "if", "for", "from", "during", "although", "though", "because", "as", "to", "with", "by", "once",
     "also", "however", "each", "every", "all", "some", "many", "most", "one", "both", "no", "not", "today", "now",
     "then", "about", "inside", "how", "why", "what", "which", "who", "where", "under", "over", "introducing",
     "welcome", "dear", "note", "see", "please", "read", "use", "do", "never", "always"]
)  # fmt: skip
_CONNECTORS = frozenset(["of", "the", "and", "de", "la", "le", "du", "von", "van", "der", "den", "da", "di", "del",
                         "&"])  # fmt: skip
_CLAUSE = frozenset(["to", "that", "which", "who", "whom", "whose", "when", "where", "while", "because", "if", "than",
                     "has", "have", "had", "we", "you", "they", "he", "she", "it", "i"])  # fmt: skip
_SUFFIXES = frozenset(["jr", "sr", "ii", "iii", "iv", "ltd", "limited", "inc", "plc", "llc", "gmbh", "ag", "corp",
                       "co", "mbe", "obe", "cbe", "kbe", "dbe", "qc", "kc", "phd"])  # fmt: skip
_HONORIFICS = frozenset(["sir", "dame", "lord", "lady", "captain", "capt", "general", "gen", "colonel", "col", "major",
                         "admiral", "sergeant", "sergent", "lieutenant", "lt", "dr", "doctor", "professor", "prof",
                         "rev", "reverend", "father", "mr", "mrs", "ms", "judge", "senator", "president"])  # fmt: skip
_KNOWN_AS = re.compile(r"\bknown (?:professionally |simply |mononymously |commonly )?as ([A-Z0-9][\w.'&-]*"
                       r"(?:\s+(?:of\s+|the\s+|and\s+|de\s+)?[A-Z0-9][\w.'&-]*)*)")  # fmt: skip
_DATES = frozenset(["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
                    "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct",
                    "nov", "dec", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"])
_COPULA = re.compile(r"\s(?:is|was|are|were|means|meant|refers to|stands for|denotes|has been|had been|became|remains)"
                     r"\s", re.IGNORECASE)  # fmt: skip
_APPOSITIVE = re.compile(r",\s+(?:a|an|the)\s", re.IGNORECASE)
_PARENTHESIS = re.compile(r"\s*\([^()]*\)")
_TRAILING_PARENTHESIS = re.compile(r"\s*\([^)]*\)\s*$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_BOLD = re.compile(r"\*\*([^*\n]{2,80}?)\*\*|__([^_\n]{2,80}?)__")
_CODE = re.compile(r"^(?=[^ ]*\d)(?=[^ ]*[A-Z])[A-Za-z0-9]+(?:[-/.][A-Za-z0-9]+)*$")
_QUOTES = "\"'“”‘’«»"
_PUNCT = _QUOTES + ",.;:!?()[]{}*_"
_PERSON = re.compile(r"\bborn\b|\b\d{3,4}\b", re.IGNORECASE)

Alias = tuple[str, ...]


def _fold(word: str) -> str:
    """Lower case without accents (an ASCII word only needs lower-casing)."""
    return word.lower() if word.isascii() else _fold_accented(word)


@lru_cache(maxsize=65536)
def _fold_accented(word: str) -> str:
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()


def words_of(text: str) -> list[str]:
    """The folded words of ``text`` (an ASCII text is lower-cased whole)."""
    if text.isascii():
        return _WORD.findall(text.lower())
    return [_fold(w) for w in _WORD.findall(text)]


def _alias(name: str) -> Alias:
    return tuple(words_of(name))


def aliases_of(title: str, extra: Sequence[str] = ()) -> set[Alias]:
    """A title's aliases as folded word tuples: the title, without a trailing parenthesis, either without a leading
    "The", and ``extra`` names."""
    out: set[Alias] = set()
    for name in (title, _TRAILING_PARENTHESIS.sub("", title).strip(), *extra):
        words = _alias(name)
        if words:
            out.add(words)
            if len(words) > 1 and words[0] == "the":
                out.add(words[1:])
    return out


def _is_code(word: str) -> bool:
    return bool(_CODE.match(word))


def _is_name_word(word: str) -> bool:
    return bool(word) and (word[0].isupper() or word[0].isdigit() or _is_code(word))


def _names(text: str, *, sentence_start: bool = True) -> list[str]:
    """The names in ``text``: codes, and runs of capitalised words (numbers and connectors such as "of" or "and"
    inside them) of two words or more; a capitalised word that only opens the sentence is not a name."""
    out: list[str] = []
    run: list[str] = []

    def close() -> None:
        while run and (run[-1].lower() in _CONNECTORS):
            run.pop()
        words = [w.lower() for w in run if not w.isdigit()]
        if _DATES.issuperset(words) or (len(words) == 1 and words[0] in _OPENERS):
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
        if raw[0] in _QUOTES + "(" and run:
            close()
        if _is_code(word):
            out.append(word)
        opens = n == 0 and sentence_start and word.lower() in _OPENERS
        joins = bool(run) and word.lower() in _CONNECTORS and not raw.endswith(tuple(_PUNCT))  # "Kiss and Tell"
        if (word and _is_name_word(word) and not opens) or joins:
            run.append(word)
        else:
            close()
        if raw[-1] in _PUNCT and run:
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
    if copula:
        candidates.append((plain[: copula.start()].split(",")[0], True))
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
        opener = bool(words) and words[0].lower() in _OPENERS and (len(words) == 1 or not words[1][:1].isupper())
        clause = any(w.lower() in _CLAUSE for w in words)  # "The jury gave the award to X, which is ..."
        if 0 < len(words) <= 10 and not opener and not clause:
            return " ".join(words), opening.group(1) if opening else "", defined
    return None


def _person_names(words: list[str], nick: list[str]) -> dict[str, int]:
    """Other names of a person's full name, with their rank: first and last name, the first two names ("Shirley
    Temple Black" -> "Shirley Temple") and the nickname with the last name ("Terry Richardson") rank 2; another given
    name with the last ("Arthur Evelyn St John Waugh" -> "Evelyn Waugh") and middle initials ("Roger O. Egeberg",
    "H. L. Mencken") rank 1."""
    names = [w for w in words if w[:1].isupper()]
    if len(names) < 2:
        return {}
    given, last = names[:-1], names[-1]
    out = {f"{names[0]} {last}": NAMED, f"{names[0]} {names[1]}": NAMED}
    if nick:
        out |= {f"{' '.join(nick)} {last}": NAMED, f"{nick[-1]} {last}": NAMED}
    for g in given[1:4]:
        out.setdefault(f"{g} {last}", DEFINED)
    if len(given) > 1:
        out.setdefault(f"{given[0]} {' '.join(g[0] for g in given[1:])} {last}", DEFINED)
        out.setdefault(f"{' '.join(g[0] for g in given)} {last}", DEFINED)
    return out


def _opening(line: str) -> dict[str, tuple[int, bool]]:
    """What an opening sentence names: its subject (defined or only opening the sentence, see :func:`_subject`)
    and other names of it (rank 2): either side of "X or Y", the subject without a title or a suffix ("Captain Henry
    Hall", "Viglen Ltd"), a person's other names (see :func:`_person_names`), the names in the parenthesis after it
    ("(formerly named Bell Labs)"), and what it is "known as"."""
    found = _subject(line)
    if found is None:
        return {}
    subject, parenthesis, defined = found
    out = {subject: (ABOUT, defined)}
    alternatives = [n.strip(_PUNCT + " ") for n in subject.split(" or ")] if " or " in subject else []
    for name in [subject, *alternatives]:
        words = name.replace("\u201c", '"').replace("\u201d", '"').split()
        while len(words) > 1 and words[-1].lower().strip(_PUNCT) in _SUFFIXES:
            words.pop()
        while len(words) > 2 and words[0].lower().strip(_PUNCT) in _HONORIFICS:
            words.pop(0)
        plain = [w.strip(_PUNCT) for w in words if w[0] not in _QUOTES]
        nick = [w.strip(_QUOTES) for w in words if w[0] in _QUOTES or w[-1] in _QUOTES]
        variants = {" ".join(words): NAMED, " ".join(plain): NAMED}
        if _PERSON.search(parenthesis) or nick:
            variants = _person_names(plain, nick) | variants
        for variant, rank in variants.items():
            out.setdefault(variant, (rank, True))
    for name in _names(parenthesis, sentence_start=False):
        out.setdefault(name, (NAMED, True))
    known = _KNOWN_AS.search(line[:300])
    if known:
        out.setdefault(known.group(1), (NAMED, True))
    return out


def _first_sentences(text: str, title: str, opens_document: bool) -> list[str]:
    """The opening lines whose first sentence defines a subject: the body's first line (when the chunk opens its
    document) and the first line after each Markdown heading."""
    lines = text.splitlines()
    if title and lines and lines[0].strip() == title:
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


def chunk_anchors(text: str, metadata: Mapping[str, Any]) -> dict[Alias, int]:
    """What one chunk defines: each anchor (folded word tuple) with its rank (3: the chunk is about it; 2: a name
    or code inside those; 1: a bold term or a later definition). A function of the chunk alone, so it can be
    computed when the chunk is indexed.

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

    def about(name: str) -> None:
        for alias in aliases_of(name):
            if out.get(alias, 0) < ABOUT:
                out[alias] = ABOUT
        for part in _names(_TRAILING_PARENTHESIS.sub("", name)):
            add(part, NAMED)

    title = str(metadata.get("title") or "").strip()
    if title:
        about(title)
    extra = metadata.get("aliases") or ()
    for name in [a.strip() for a in extra.split(",")] if isinstance(extra, str) else [str(a) for a in extra]:
        if name:
            about(name)
    for heading in _HEADING.findall(text):
        about(heading.strip().strip("*_ "))
    opens = int(metadata.get("position") or 0) == 0
    for line in _first_sentences(text, title, opens):
        for name, (rank, defined) in _opening(line).items():
            if rank < ABOUT:
                add(name, rank)
            elif defined or _alias(name) in out:  # a name opening the sentence is its subject when the title agrees
                about(name)
            else:
                add(name, DEFINED)
    for bold in _BOLD.finditer(text):
        add(bold.group(1) or bold.group(2), DEFINED)
    for sentence in re.split(r"(?<=[.!?])\s+", text)[1:]:
        copula = _COPULA.search(sentence[:120])
        if copula:
            for name in _names(sentence[: copula.start()]):
                if sentence.lstrip(_QUOTES).startswith(name) or sentence.startswith(("The " + name, "the " + name)):
                    add(name, DEFINED)
    return out
