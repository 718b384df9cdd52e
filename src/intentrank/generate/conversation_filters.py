"""Lexical filters of conversational test sets: is a generated contextual question really
contextual, and can its meaning still be recovered from the conversation?

Terms are compared as Snowball (English) stems of content words. A query's **key terms** are
its words minus stop words, question words, auxiliaries and reference words. For a contextual
question ``c`` of query ``q`` with earlier turns ``H`` (questions and answers), the **missing
terms** are key(q) - key(c): what a rewriter must bring back. The rules, in order, the first
that holds rejecting the conversation:

``identical``       ``c`` has the same words as ``q`` (case and punctuation aside)
``self_contained``  no missing terms: ``c`` keeps every key term of ``q``, so there is nothing
                    to resolve (even if it also has a pronoun)
``drifted``         ``c`` keeps no key term of ``q``, or under ``min_faithful`` of c's own key
                    terms are q's: it asks something else, and restoring context would not
                    give ``q``
``repeats_query``   an earlier question has every key term of ``q`` (the conversation already
                    asked it), or has the same words as ``c``
``unrecoverable``   more than ``max_lost`` missing terms occur nowhere in ``H``: no rewriter
                    could bring them back (``max_lost`` = 0: every term must be recoverable;
                    the generator's default 1 lets one term go, and records it)
``unsupported``     under ``min_support`` of the earlier answers' content words occur in the
                    source document (:func:`.filters.support_share`)

A kept question resolves its context by a **pronoun** (a reference word such as it, they,
this, those, there, such, that ``q`` does not have) or else by **ellipsis** (missing terms,
no reference word).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence

from intentrank.generate.filters import STOPWORDS, content_words, support_share, words
from intentrank.index.hits import pystemmer

REFERENCE_WORDS = frozenset({
    "it", "its", "itself", "they", "them", "their", "theirs", "themselves", "this", "that",
    "these", "those", "he", "him", "his", "she", "her", "there", "such", "same", "former",
    "latter", "one", "ones", "above",
})
KEY_STOPWORDS = STOPWORDS | REFERENCE_WORDS | frozenset({
    "am", "been", "being", "has", "have", "had", "did", "done", "will", "would", "shall",
    "should", "may", "might", "must", "could", "not", "no", "any", "some", "so", "far", "than",
    "then", "there", "about", "into", "onto", "over", "under", "between", "we", "our", "us",
    "you", "your", "i", "me", "my", "whose", "whom", "all", "also", "very", "much", "many",
    "more", "most", "other", "own", "just", "only", "if", "but", "nor", "too", "etc", "vs",
})


def key_terms(text: str) -> set[str]:
    """Stems of ``text``'s key words (stop, question, auxiliary and reference words out;
    one-letter words out unless digits)."""
    kept = [w for w in words(text) if w not in KEY_STOPWORDS and (len(w) > 1 or w.isdigit())]
    return set(pystemmer("english", threading.get_ident()).stemWords(kept))


def missing_terms(question: str, query: str) -> set[str]:
    """Key terms of ``query`` that ``question`` leaves out."""
    return key_terms(query) - key_terms(question)


def dropped_phrases(question: str, query: str) -> list[str]:
    """The runs of ``query``'s words that ``question`` leaves out: maximal spans from a word
    whose stem is a missing term to the next such word, with only non-key words between
    (e.g. "triacylglycerols in fruit flies"), in query order."""
    missing = missing_terms(question, query)
    tokens = query.split()
    hits = [i for i, tok in enumerate(tokens) if key_terms(tok) & missing]
    spans: list[list[int]] = []
    for i in hits:
        if spans and all(not key_terms(t) for t in tokens[spans[-1][-1] + 1:i]):
            spans[-1].append(i)
        else:
            spans.append([i])
    return [" ".join(tokens[s[0]:s[-1] + 1]).strip(".,;:?!()") for s in spans]


def link_kind(question: str, query: str) -> str:
    """``"pronoun"`` when ``question`` has a reference word ``query`` lacks, else
    ``"ellipsis"``."""
    return "pronoun" if (set(words(question)) & REFERENCE_WORDS) - set(words(query)) \
        else "ellipsis"


def faithful_share(question: str, query: str) -> float:
    """The share of ``question``'s key terms that are ``query``'s (1.0 when it has none)."""
    mine = key_terms(question)
    return len(mine & key_terms(query)) / len(mine) if mine else 1.0


Problem = tuple[str, str]  # (reason, detail)


def contextual_problem(question: str, query: str, min_faithful: float = 0.5
                       ) -> Problem | None:
    """``identical``, ``self_contained`` or ``drifted`` (see the module docstring), or None."""
    if words(question) == words(query):
        return "identical", "the contextual question is the query"
    q_terms = key_terms(query)
    if not missing_terms(question, query):
        return "self_contained", (f"it keeps all {len(q_terms)} key terms of the query; "
                                  f"nothing to resolve")
    if not key_terms(question) & q_terms:
        return "drifted", "it keeps no key term of the query"
    share = faithful_share(question, query)
    if share < min_faithful:
        new = sorted(key_terms(question) - q_terms)
        return "drifted", (f"only {share:.0%} of its key terms are the query's "
                           f"(new: {', '.join(new[:6])})")
    return None


def lost_terms(question: str, query: str, turns: Iterable[Mapping[str, str]]) -> set[str]:
    """Key terms of ``query`` found neither in ``question`` nor in the earlier ``turns``
    (their questions and answers)."""
    said = [key_terms(t.get("question", "")) | key_terms(t.get("answer", "")) for t in turns]
    return missing_terms(question, query).difference(*said)


def history_problem(question: str, query: str, turns: Sequence[Mapping[str, str]],
                    document: str, min_support: float = 0.5, recoverable: bool = True,
                    max_lost: int = 0) -> Problem | None:
    """``repeats_query``, ``unrecoverable`` (unless ``recoverable`` is False: turns put
    before others that already recover the terms) or ``unsupported`` for earlier ``turns``
    before the contextual ``question`` (see the module docstring), or None."""
    q_terms = key_terms(query)
    for i, t in enumerate(turns, 1):
        if q_terms and q_terms <= key_terms(t["question"]):
            return "repeats_query", f"earlier question {i} already asks the query"
        if words(t["question"]) == words(question):
            return "repeats_query", f"earlier question {i} is the contextual question"
    lost = lost_terms(question, query, turns) if recoverable else set()
    if len(lost) > max_lost:
        return "unrecoverable", (f"{len(lost)} key term(s) of the query occur neither in the "
                                 f"question nor in the conversation: "
                                 f"{', '.join(sorted(lost)[:8])}")
    answers = " ".join(t["answer"] for t in turns)
    if content_words(answers):
        share = support_share(answers, [document])
        if share < min_support:
            return "unsupported", (f"only {share:.0%} of the answers' words occur in the "
                                   f"source document")
    return None
