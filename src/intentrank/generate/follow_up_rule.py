"""A contextual follow-up built by rule: the query with its topic replaced by a pronoun.

The LLM names the query's topic (copied word for word); :func:`rule_follow_up` replaces every
occurrence of that span (case aside, a preceding "the", "a", "an", "this", "these" or "those"
taken with it) by a pronoun, so no other word of the query is lost. A preceding "that" stays:
in a query it is nearly always a conjunction ("shows that statins ..."). The pronoun follows
the topic's **number** and the span's **position**:

- the query's first words (a statement's subject): ``This`` / ``These``;
- after a question's auxiliary alone or after a wh-word ("does", "how does", "what are":
  the question's subject), or after a conjunction that opens a clause ("that", "whether",
  "if", "because", "while", "although"): ``it`` / ``they``;
- followed by ``'s``, or by a bare ``'`` after a final "s" ("cells'"; a possessive):
  ``its`` / ``their``;
- anywhere else (an object): ``it`` / ``them``.

The topic is plural when its head (the last word before a preposition or relative word such
as "of", "in", "that") is a known irregular plural ("mice", "bacteria", ...) or ends in "s"
but not in "ss", "us", "is" or "ics" and is not all capitals ("OPMLs" is plural, "AIDS" and
"sepsis" are not), or when the words before the head hold "and". A topic that is not a span
of the query, is all of it, or is an abbreviation in parentheses ("... Malignant Lesions
(OPMLs)": the abbreviated words stay) gives no follow-up (:class:`UnusableTopic`). The rule
knows no grammar beyond this: a topic used as a modifier ("p16 accumulation" with topic
"p16") reads "it accumulation"; the generator's filters still judge every follow-up.
"""

from __future__ import annotations

import re

DETERMINERS = ("the", "a", "an", "this", "that", "these", "those")
TAKEN_DETERMINERS = ("the", "a", "an", "this", "these", "those")  # replaced with the topic
CLAUSE_OPENERS = frozenset({"that", "whether", "if", "because", "while", "although"})
AUXILIARIES = frozenset({
    "do", "does", "did", "is", "are", "was", "were", "can", "could", "will", "would",
    "should", "shall", "has", "have", "had", "may", "might", "must"})
WH_WORDS = frozenset({"what", "how", "why", "when", "where", "which", "who", "whom",
                      "whose", "whether"})
HEAD_ENDS = frozenset({
    "of", "in", "on", "for", "with", "from", "to", "by", "at", "among", "amongst", "during",
    "between", "after", "before", "within", "without", "under", "over", "versus", "vs",
    "via", "into", "through", "that", "which", "who", "whose", "as", "against", "across"})
IRREGULAR_PLURALS = frozenset({
    "mice", "children", "people", "men", "women", "teeth", "feet", "geese", "bacteria",
    "criteria", "phenomena", "fungi", "nuclei", "stimuli", "bacilli", "media", "larvae",
    "vertebrae", "alumni", "indices", "matrices", "vertices", "oocytes"})
S_SINGULARS = frozenset({"diabetes", "measles", "mumps", "news", "series", "species",
                         "herpes", "rabies", "scabies", "gas", "lens", "bias", "atlas"})
PRONOUNS = {  # position -> (singular, plural)
    "start": ("This", "These"), "subject": ("it", "they"), "possessive": ("its", "their"),
    "object": ("it", "them")}
EDGE_CHARS = ".,;:?!\"'()[]{} \t\n"


class UnusableTopic(ValueError):
    """The topic cannot be replaced in the query (not a span of it, or all of it)."""


def _words(text: str) -> list[str]:
    return re.findall(r"[\w'’-]+", text.lower())


def topic_is_plural(topic: str) -> bool:
    """Whether ``topic`` (a noun phrase) is plural, by its head word (see the module
    docstring)."""
    ws = [w.strip(EDGE_CHARS) for w in topic.split()]
    ws = [w for w in ws if w]
    if ws and ws[0].lower() in DETERMINERS:
        ws = ws[1:]
    cut = next((i for i, w in enumerate(ws) if i and w.lower() in HEAD_ENDS), len(ws))
    before = [w.lower() for w in ws[:cut]]
    if not before:
        return False
    if "and" in before[:-1]:
        return True
    raw = ws[cut - 1]
    head = before[-1]
    if head in IRREGULAR_PLURALS:
        return True
    if head in S_SINGULARS or raw.isupper() or head.endswith(("'s", "’s")):
        return False
    return len(head) > 2 and head.endswith("s") and not head.endswith(("ss", "us", "is", "ics"))


def _position(before: str, possessive: bool) -> str:
    if possessive:
        return "possessive"
    lead = _words(before)
    if not lead:
        return "start"
    if lead[-1] in CLAUSE_OPENERS:
        return "subject"
    if lead[-1] in AUXILIARIES and all(w in WH_WORDS or w in AUXILIARIES for w in lead):
        return "subject"
    return "object"


def rule_follow_up(query: str, topic: str) -> str:
    """``query`` with each occurrence of ``topic`` replaced by a pronoun (see the module
    docstring); raises :class:`UnusableTopic` naming the topic when it cannot be."""
    clean = topic.strip(EDGE_CHARS)
    ws = clean.split()
    if ws and ws[0].lower() in DETERMINERS and len(ws) > 1:
        ws = ws[1:]
    if not ws:
        raise UnusableTopic(f"the topic {topic!r} has no words")
    span = r"\s+".join(re.escape(w) for w in ws)
    det = "|".join(TAKEN_DETERMINERS)
    pattern = re.compile(rf"(?<![\w'’-])(?:(?:{det})\s+)?{span}"
                         rf"(?P<poss>['’]s|(?<=s)['’])?(?![\w'’-])", re.IGNORECASE)
    matches = list(pattern.finditer(query))
    if not matches:
        raise UnusableTopic(f"the topic {clean!r} is not a span of the query")
    if not re.search(r"\w", pattern.sub(" ", query)):
        raise UnusableTopic(f"the topic {clean!r} is the whole query")
    if any(query[m.start() - 1:m.start()] == "(" and query[m.end():m.end() + 1] == ")"
           for m in matches):
        raise UnusableTopic(f"the topic {clean!r} is an abbreviation in parentheses: the "
                            f"words it abbreviates stay in the query")
    plural = topic_is_plural(" ".join(ws))
    out, last = [], 0
    for m in matches:
        position = _position(query[:m.start()], bool(m.group("poss")))
        pronoun = PRONOUNS[position][plural]
        if not query[:m.start()].strip():  # the query's first word: capitalised
            pronoun = pronoun[:1].upper() + pronoun[1:]
        out += [query[last:m.start()], pronoun]
        last = m.end()
    out.append(query[last:])
    return re.sub(r"\s+", " ", "".join(out)).strip()
