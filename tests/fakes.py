"""Small fakes shared by the tests (importable by subprocesses too): a stage with fixed
scores, an LLM backend that records its requests, a scripted question generator, and a tiny
judged collection written from dicts."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

from intentrank.core.stage import Stage
from intentrank.llm.base import ChatParams, LLMReply, Message
from intentrank.types import Ranking, Trace


def write_collection(root: Path, docs: dict[str, str], queries: dict[str, str],
                     qrels: list[tuple[str, str, int]], split: str = "test") -> Path:
    """A BEIR-layout collection at ``root``: corpus.jsonl (untitled documents),
    queries.jsonl and qrels/<split>.tsv from (query id, doc id, grade) rows."""
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items()))
    (root / "queries.jsonl").write_text("".join(
        json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    (root / "qrels" / f"{split}.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in qrels))
    return root


class FakeClock:
    """A stand-in for ``time.perf_counter`` that moves only when told to (a test patches it in
    with ``monkeypatch.setattr("intentrank.types.time.perf_counter", clock)``)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Fixed(Stage):
    """A fake retriever returning fixed scores (unit tests only); with a ``clock``, each call
    takes 5 s of it."""

    def __init__(self, name: str, scores: dict[str, float], clock: FakeClock | None = None
                 ) -> None:
        self.name, self.scores, self.clock = name, scores, clock

    def transform(self, rankings: list[Ranking], trace: Trace) -> list[Ranking]:
        if self.clock is not None:
            self.clock.now += 5.0
        return [Ranking.from_scores(r.query, self.scores, trace.path_of(self))
                for r in rankings]


class RecordingLLM:
    """An LLM backend that records every request (messages and decoding parameters) and the
    peak number in flight (so a test sees a batch run concurrently); ``answer`` replies,
    after ``delay`` seconds."""

    name, model = "fake:recording", "recording"

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self.active = self.peak = 0
        self._lock = threading.Lock()

    def answer(self, messages: list[Message], params: ChatParams) -> LLMReply:
        raise NotImplementedError

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        with self._lock:
            self.requests.append({"messages": messages, **params.as_dict()})
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            time.sleep(self.delay)
            return self.answer(messages, params)
        finally:
            with self._lock:
                self.active -= 1


def _doc(prompt: str, label: str = "Document:") -> str:
    return prompt.split(label, 1)[1].strip().split("\n\n", 1)[0]


def _fit_length(question: str, prompt: str) -> str:
    """``question`` fitted to the words the prompt asks for ("of fewer than 7 words", "of 10
    to 20 words", "of more than 6 words"): its first words dropped, or the first document's
    later words, in reverse order (so no word pair is copied), added before its "?"."""
    low = [int(a) for a in re.findall(r"of (\d+) to \d+ words", prompt)]
    low += [int(n) + 1 for n in re.findall(r"of more than (\d+) words", prompt)]
    high = [int(n) - 1 for n in re.findall(r"of fewer than (\d+) words", prompt)]
    high += [int(b) for b in re.findall(r"of \d+ to (\d+) words", prompt)]
    have = question.split()
    if high and len(have) > min(high):
        return " ".join(have[len(have) - min(high):])
    if not low or len(have) >= max(low):
        return question
    label = "Document 1:" if "Document 1:" in prompt else "Document:"
    spare = re.findall(r"[a-z]{4,}", _doc(prompt, label).lower())[12:][::-1] or ["further"]
    pad = [spare[i % len(spare)] for i in range(max(low) - len(have))]
    return " ".join([*have[:-1], have[-1].rstrip("?"), *pad]) + "?"


class GenerationLLM:
    """Writes a question from words of the (first) document, checks everything as supported
    and one-document-unanswerable; ``bad`` maps a call number to a reply text to send instead
    (e.g. malformed JSON); ``delay`` seconds per call. The question has 8 words, fitted to
    the length the prompt asks for unless ``follow_length`` is False."""

    name, model = "fake:generation", "fake-generation"

    def __init__(self, bad: dict[int, str] | None = None, delay: float = 0.0,
                 supported: bool = True, answerable: bool = False,
                 follow_length: bool = True) -> None:
        self.bad, self.delay = bad or {}, delay
        self.supported, self.answerable = supported, answerable
        self.follow_length = follow_length
        self.calls = 0

    def chat(self, messages: list[Message], params: ChatParams) -> LLMReply:
        self.calls += 1
        time.sleep(self.delay)
        prompt = messages[-1]["content"]
        if self.calls in self.bad:
            return LLMReply(self.bad[self.calls], 10, 10, raw={"finish_reason": "stop"})
        if "Proposed answer:" in prompt:
            text = json.dumps({"supported": self.supported})
        elif "Can the question be answered completely" in prompt:
            text = json.dumps({"answerable": self.answerable})
        else:
            if "Document 1:" in prompt:  # a pair: words and answer from both documents
                a, b = _doc(prompt, "Document 1:"), _doc(prompt, "Document 2:")
                wa, wb = (re.findall(r"[a-z]{4,}", d.lower())[:12] for d in (a, b))
                question = f"Which result involves {wa[7]} then {wb[3]} and {wa[5]}?"
                answer = f"{a[:80]} and {b[:80]}"
            else:
                doc = _doc(prompt, "Document:")
                words = re.findall(r"[a-z]{4,}", doc.lower())[:12]
                question = f"Which result involves {words[7]} then {words[3]} and {words[5]}?"
                answer = doc[:120]
            if self.follow_length:
                question = _fit_length(question, prompt)
            text = json.dumps({"question": question, "answer": answer})
        return LLMReply(text, 100, 20, raw={"finish_reason": "stop"})
