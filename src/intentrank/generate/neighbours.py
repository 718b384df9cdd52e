"""The related document a generated conversation's history is written from
(``history_from: neighbour``, :mod:`.conversations`)."""

from __future__ import annotations

from intentrank.generate import runlog
from intentrank.generate.conversation_filters import key_terms
from intentrank.index.hits import bm25_tokenize


class Neighbours:
    """A document's nearest BM25 neighbours in the corpus (bm25s with English stop words and
    the Snowball stemmer) among those that name given phrases."""

    def __init__(self, texts: dict[str, str], chars: int) -> None:
        import bm25s

        self.ids, self.texts, self.chars = list(texts), texts, chars
        self.retriever = bm25s.BM25()
        self.retriever.index(bm25_tokenize(list(texts.values()), "en", "english"),
                             show_progress=False)
        self._terms: list[set[str]] | None = None

    def of(self, doc: str, judged: dict[str, int], phrases: list[str] | None = None
           ) -> str | None:
        """Among the documents other than ``doc`` that hold every key term of ``phrases``
        and that ``judged`` does not grade relevant (grade > 0), the one BM25 scores highest
        for ``doc``'s first ``chars`` characters; None if there is none."""
        import numpy as np

        need = key_terms(" ".join(phrases or []))
        if self._terms is None and need:
            self._terms = [key_terms(t) for t in self.texts.values()]
        query = bm25_tokenize([runlog.clip(self.texts[doc], self.chars)], "en", "english")[0]
        known = [w for w in query if w in self.retriever.vocab_dict]
        scores = np.asarray(self.retriever.get_scores(known)) if known else np.zeros(1)
        for row in np.lexsort((np.arange(len(scores)), -scores)):
            other = self.ids[int(row)]
            if scores[row] <= 0:
                return None
            if other != doc and judged.get(other, 0) <= 0 and \
                    (not need or need <= self._terms[int(row)]):  # type: ignore[index]
                return other
        return None

