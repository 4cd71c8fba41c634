"""Test-set module: questions a manual's readers ask, made from its definitions (no model).

A manual states most of what its users ask about in definitions: an option or a setting, then what it does and
its default (``--prune=<date>: Prune loose objects older than date (default is 2 weeks ago ...)``; a settings page's
``### CACHE_MIDDLEWARE_SECONDS`` heading, then ``Default: 600`` and a description). The kit's loaders keep them as
``term: description`` lines and ``#`` headings (:mod:`modular_rag.ingest.html`), and :func:`definitions` reads them
back. The ``manual_question`` maker asks four kinds of question of a definition, the kinds a manual's users write:

- ``default``: "What does --prune default to in git-gc?"; the answer is the stated default (``2 weeks``).
- ``which``: "Which git-gc option prunes loose objects older than date?"; the answer is the term's name.
- ``how``: "How do I prune loose objects older than date with git-gc?"; the answer is the term's name.
- ``what``: "What does --quiet do in git-gc?"; the answer is a phrase of the description found nowhere else in
  the passage, so only the defining sentence holds it.

Nothing is made from code, tables of contents, navigation or syntax lines: a term must read as a name (an option,
a dotted or upper-case setting, a call), a description as prose. Questions keep the manual's case, and a share
(``lower``) is written in lower case, as users type. With share ``corpus`` (the default), the maker takes the share
of passages that hold a definition (a manual's reference pages most of the set, a corpus of articles none).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from pydantic import Field

from modular_rag.providers import Providers
from modular_rag.questions import PassageSet, Question, Span
from modular_rag.registry import OperatorParams, Port, operator
from modular_rag.text import ENGLISH_STOPWORDS, normalize_answer

__all__ = ["Definition", "definitions", "defined_share"]

KINDS = ("default", "which", "how", "what")
"""The kinds of question the maker writes."""

_DEF_LINE = re.compile(r"^(?P<term>[^\s:#`|][^:\n]{0,79}?):[ \t]+(?P<desc>\S[^\n]*)$", re.M)
_HEADING = re.compile(r"^#{2,6}[ \t]+(?P<term>[^\n]{1,80})$", re.M)
_BREAK = re.compile(r"\n[ \t]*\n|^#{1,6} |^```", re.M)  # a blank line, a heading or a code fence ends a body
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(`'\"])")
_DEFAULT = re.compile(
    r"(?:\bdefaults? (?:value )?(?:is|are|of \S+ is)|\bdefaults to|\(default:?|^default:|\bdefault:)\s*"
    r"(?P<value>'[^'\n]{1,40}'|\"[^\"\n]{1,40}\"|`[^`\n]{1,40}`|"
    r"-?\d[\d,.]*(?:\s?(?:seconds?|minutes?|hours?|days?|weeks?|months?|years?|bytes|[kKMG]i?B|%|ms)\b)?|"
    r"[A-Za-z_][\w.-]*)",
    re.I | re.M,
)
_VALUE_WORDS = frozenset({"true", "false", "none", "yes", "no", "on", "off", "null", "empty", "unset", "auto"})
_NOT_VERB_WORDS = """
    the a an this that these those it its if when while with without for in on at by as to of from see
    note only usually default defaults number whether each every all any some other such one two there
    here also since because after before until unless although however then thus so not no yes same like
    where which who what how why more most less many much few new old similar deprecated obsolete instead
    format alias synonym equivalent shorthand opposite alternative name path value string file directory list
    type mode true false under over none null
"""
_NOT_VERB = frozenset(_NOT_VERB_WORDS.split())  # first words of a description that are no verb
_SYNTAX = re.compile(r"\.\s?\.\s?\.|[{}\[\];]|\s{3,}|==|=>|::")


@dataclass(frozen=True)
class Definition:
    """A defined term of a passage: its names, its description, and where the description sits in the passage.

    Attributes:
        term: The term as written (``--prune=<date>``, ``CACHE_MIDDLEWARE_SECONDS``).
        names: The names a reader uses for it (``--prune``; ``-o`` and ``--output-directory`` for an alias list).
        noun: What it is: ``option``, ``setting`` or ``function``.
        body: Its description (the rest of the definition line, or the paragraphs under a heading).
        start: Where ``body`` starts in the passage text.
        term_at: Where ``term`` starts in the passage text.
    """

    term: str
    names: tuple[str, ...]
    noun: str
    body: str
    start: int
    term_at: int


def _names(term: str) -> tuple[str, ...]:
    """The names a term goes by: each comma-separated alias, cut at its argument (``=<date>``, `` <dir>``, ``(x)``)
    and without a leading ``class``/``def``/``exception``; each must read as a name (:func:`_name_ok`)."""
    out = []
    for alias in term.split(","):
        alias = re.sub(r"^(?:class|def|exception|attribute|method)\s+", "", alias.strip().strip("`*"))
        name = re.split(r"[=\s\[<(]", alias, maxsplit=1)[0].rstrip(".:")
        if _name_ok(name):
            out.append(name)
    return tuple(dict.fromkeys(out))


_NAME = re.compile(r"-{1,2}[A-Za-z0-9][\w-]*|[A-Za-z_][\w.-]*(?:<\w+>[\w.-]*)*")


def _name_ok(name: str) -> bool:
    """A name a reader would type: an option (``--prune``), a dotted, snake or camel-cased identifier
    (``gc.pruneExpire``, ``SESSION_COOKIE_AGE``, ``arg_joiner``); not a plain word (``DESCRIPTION``, ``value``) or a
    section number."""
    if not _NAME.fullmatch(name) or len(name) < 2:
        return False
    return name.startswith("-") or "_" in name or "." in name.strip(".") or bool(re.search(r"[a-z][A-Z]", name))


def _noun(term: str) -> str:
    if term.lstrip("`").startswith("-"):
        return "option"
    if "(" in term or term.startswith(("def ", "class ")):
        return "function"
    return "setting"


def _term_ok(term: str) -> bool:
    """A term reads as a name: few words, no syntax, and its first alias a name."""
    if len(term.split()) > 6 or _SYNTAX.search(term) or term.endswith((".", "?")):
        return False
    return bool(_names(term))


def _prose(text: str) -> bool:
    """A description reads as prose: mostly words, not code or a table of contents."""
    words = text.split()
    letters = sum(c.isalpha() or c.isspace() for c in text)
    return len(words) >= 3 and letters >= 0.8 * len(text) and not _SYNTAX.search(text[:200])


def definitions(text: str) -> list[Definition]:
    """The definitions of a passage, in order: ``term: description`` lines whose term reads as a name, and headings
    that read as a name followed by their description (a settings page's ``### NAME`` then ``Default: ...``)."""
    found: list[Definition] = []
    fences = [m.span() for m in re.finditer(r"^```.*?^```", text, re.M | re.S)]

    def in_code(at: int) -> bool:
        return any(a <= at < b for a, b in fences)

    def body_from(start: int) -> str:
        end = _BREAK.search(text, start + 1)
        body = text[start : end.start() if end else len(text)]
        if body.lstrip().lower().startswith("default"):  # "Default: 600", then the description's paragraph
            nxt = _BREAK.search(text, start + len(body) + 1)
            rest = text[start + len(body) : nxt.start() if nxt else len(text)]
            if not rest.lstrip().startswith(("#", "```")):
                body = body + " " + rest.strip()
        return " ".join(body.split())

    for m in _DEF_LINE.finditer(text):
        term = m.group("term").strip()
        if in_code(m.start()) or not _term_ok(term):
            continue
        names = _names(term)
        body = body_from(m.start("desc"))
        if names and _prose(body):
            found.append(Definition(term, names, _noun(term), body, m.start("desc"), m.start("term")))
    for m in _HEADING.finditer(text):
        term = m.group("term").strip()
        if in_code(m.start()) or not _term_ok(term) or len(term.split()) > 1 and "(" not in term:
            continue  # a heading names a setting when it is the name alone ("### SESSION_COOKIE_AGE")
        start = m.end() + 1
        body = body_from(start) if start < len(text) else ""
        names = _names(term)
        if names and _prose(body):
            found.append(Definition(term, names, _noun(term), body, start, m.start("term")))
    return sorted(found, key=lambda d: d.start)


def defined_share(passages: PassageSet, sample: int = 1000) -> float:
    """The share of passages (a seeded sample of ``sample``) holding at least one definition: how much of the corpus
    a manual's questions can be made from (a reference manual most of it, encyclopedia paragraphs none)."""
    if not len(passages):
        return 0.0
    positions = passages.order(random.Random("defined_share"))[:sample]
    return sum(bool(definitions(passages[i].text)) for i in positions) / len(positions)


def _first_clause(body: str, max_words: int) -> str:
    """The description's first sentence cut at its first parenthesis, semicolon, colon or comma: ``""`` unless it
    holds 3 to ``max_words`` words (a clause cut short would ask half a question)."""
    body = re.sub(r"^default:?\s*\S+(?:\s*\([^)]*\))?\s*", "", body, flags=re.I)  # "Default: 600 The number ..."
    sentence = _SENTENCE_END.split(body, maxsplit=1)[0]
    clause = re.split(r"\s*[(;,:]\s*|\s+-\s+|\.\s*$", sentence, maxsplit=1)[0]
    words = clause.split()
    return clause if 3 <= len(words) <= max_words else ""


def _third_person(verb: str) -> str:
    if verb.endswith(("s", "sh", "ch", "x", "z")) and not verb.endswith("ss"):
        return verb  # already "Returns"
    if verb.endswith(("ss", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _topic(title: str) -> str:
    """The page a question names, from its title (``git-gc(1)`` -> ``git-gc``)."""
    title = re.sub(r"\(\d\w*\)", "", title).strip()
    return re.split(r"\s+[|\u2014\u2013-]\s+", title, maxsplit=1)[0].strip()


def _unique_phrase(body: str, passage: str, words: int) -> str:
    """A run of ``words`` words of the description's first clause (not starting with a stopword) that occurs once in
    the passage, so only the defining sentence holds it; ``""`` if none does."""
    clause = _first_clause(body, 40).split()
    text = f" {normalize_answer(passage)} "
    for k in range(1, len(clause) - words + 1):  # not from the first word: a verb or an article ("Returns an")
        run = clause[k : k + words]
        content = [w for w in run if w.lower() not in ENGLISH_STOPWORDS and w.isalpha()]
        if run[0].lower() in ENGLISH_STOPWORDS or run[-1].lower() in ENGLISH_STOPWORDS or len(content) < 2:
            continue
        phrase = " ".join(run).strip(".,;:")
        norm = normalize_answer(phrase)
        if norm and text.count(f" {norm} ") == 1:
            return phrase
    return ""


class ManualParams(OperatorParams):
    kinds: list[str] = Field(list(KINDS), min_length=1, description=f"kinds of question asked, of {list(KINDS)}")
    mix: dict[str, float] = Field(
        {"default": 0.3, "which": 0.25, "how": 0.3, "what": 0.15},
        description="each kind's share of the questions (the kinds written questions of manuals hold: users ask "
        "how to do something and what a default is more than what a named option does)",
    )
    describe: float = Field(
        0.5, ge=0.0, le=1.0, description="share of default questions that describe the setting rather than name it"
    )
    lower: float = Field(0.3, ge=0.0, le=1.0, description="share of questions written in lower case, as users type")
    max_words: int = Field(7, ge=3, le=12, description="a description is cut to this many words in a question")
    phrase_words: int = Field(3, ge=2, le=6, description="words of a 'what' question's answer phrase")


class _ManualMaker:
    """The manual maker: a question maker that also says its share of a set read from the corpus."""

    def __init__(self, params: ManualParams) -> None:
        unknown = sorted((set(params.kinds) | set(params.mix)) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown kinds {unknown}; allowed: {list(KINDS)}")
        if any(v <= 0 for v in params.mix.values()):
            raise ValueError(f"mix shares must be > 0 (got {params.mix})")
        self.params = params

    def corpus_share(self, passages: PassageSet) -> float:
        """The share of the set when the maker's share is ``corpus``: :func:`defined_share`."""
        return defined_share(passages)

    def _ask(self, d: Definition, kind: str, topic: str, passage: str, rng: random.Random) -> tuple[str, str] | None:
        """A question of ``kind`` about ``d`` and its answer, or ``None`` when the definition cannot answer it."""
        name, where = rng.choice(d.names), f" in {topic}" if topic else ""
        if kind == "default":
            m = _DEFAULT.search(d.body[:400])
            value = m.group("value").strip("'\"`").rstrip(".,") if m else ""
            low = value.lower()
            if not value or (low in ENGLISH_STOPWORDS and low not in _VALUE_WORDS) or low == name.lower():
                return None
            clause = _first_clause(d.body, self.params.max_words)
            head = clause.split(" ", 1)[0].lower() if clause else ""
            if head in ("the", "a", "an") and rng.random() < self.params.describe:  # "The age of session cookies"
                return f"What is the default {clause.split(' ', 1)[1]}{where}?", value
            form = rng.choice(
                ("What is the default value of {n}{w}?", "What does {n} default to{w}?", "What is {n} by default{w}?")
            )
            return form.format(n=name, w=where), value
        clause = _first_clause(d.body, self.params.max_words)
        if kind in ("which", "how") and clause:
            first, rest = clause.split(" ", 1)
            if (
                first.lower() in _NOT_VERB
                or not first[:1].isupper()
                or not first.isalpha()
                or first.endswith("ly")
                or re.search("[a-z][A-Z]", first)
            ):
                if kind == "how" or first.lower() not in ("the", "a", "an", "whether"):
                    return None
                action = ("decides " if first.lower() == "whether" else "sets ") + clause[:1].lower() + clause[1:]
            elif kind == "how":
                if _third_person(first) == first or first.lower().endswith("ed") and len(first) > 5:
                    return None  # "Returns ...": not an instruction
                return f"How do I {first.lower()} {rest} with {topic or 'it'}?", d.names[0]
            else:
                action = f"{_third_person(first).lower()} {rest}"
            plain = not topic or topic.lower().rstrip("s") == d.noun
            return f"Which {d.noun}{'' if plain else ' of ' + topic} {action}?", d.names[0]
        if kind == "what":
            phrase = _unique_phrase(d.body, passage, self.params.phrase_words)
            if phrase:
                return rng.choice(("What does {n} do{w}?", "What is {n} for{w}?")).format(n=name, w=where), phrase
        return None

    def __call__(self, passages: PassageSet, n: int, rng: random.Random) -> list[Question]:
        params, out = self.params, list[Question]()
        per_kind = {k: 0 for k in params.kinds}
        # each passage's definitions, shuffled, taken two a passage a round, so that the set covers the manual
        queue: list[tuple[int, list[Definition]]] = []
        for i in passages.order(rng):
            found = definitions(passages[i].text)
            rng.shuffle(found)
            if found:
                queue.append((i, found))
        weights = {k: params.mix.get(k, 1.0 / len(params.kinds)) for k in params.kinds}
        share = {k: w / sum(weights.values()) for k, w in weights.items()}  # each kind's share of the questions
        while queue and len(out) < n:
            for i, found in queue:
                if len(out) >= n:
                    break
                p = passages[i]
                topic = _topic(p.title)
                for d in found[:2]:
                    for k in sorted(params.kinds, key=lambda k: (per_kind[k] / share[k], rng.random())):
                        if per_kind[k] > share[k] * (len(out) + 1) + 1:
                            continue  # this kind holds its share already: the definition waits for another kind
                        asked = self._ask(d, k, topic, p.text, rng)
                        at = p.text.find(asked[1], d.term_at) if asked else -1
                        if asked is None or at < 0:
                            continue
                        text = asked[0].lower() if rng.random() < params.lower else asked[0]
                        aliases = d.names if asked[1] in d.names else ()
                        meta = {"term": d.term, "sentence": d.body[:300], "aliases": aliases}
                        span = (Span(p.id, at, at + len(asked[1])),)
                        out.append(Question(text, k, (p.id,), asked[1], _answer_type(asked[1]), span, meta))
                        per_kind[k] += 1
                        break
                del found[:2]
            queue = [(i, found) for i, found in queue if found]
        return out[:n]


def _answer_type(answer: str) -> str:
    return "number" if re.match(r"-?\d", answer) else "name" if len(answer.split()) == 1 else "phrase"


@operator("testset", "question_making", "manual_question", port=Port.QUESTION)
def manual_question(params: ManualParams, providers: Providers) -> _ManualMaker:
    """Questions a manual's users ask, made from its definitions (``term: description`` lines and headings that
    name an option or a setting): its default value, which option does something, how to do something, what an
    option does. No model; nothing made from code, navigation or syntax lines. With share ``corpus`` (its
    default), the maker takes the share of passages that hold a definition."""
    return _ManualMaker(params)
