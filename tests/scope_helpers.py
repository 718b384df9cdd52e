"""What the scope tests and the leak fuzzer share: a real index of SciFact abstracts split into
three tenants with access groups in their metadata (built once per test session), the keys
over it, an oracle for who may see which document that does not use the code under test,
and a service app on it (in-process, a scripted LLM that records every prompt)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

from service_helpers import ScriptedLLM

from intentrank.llm.client import LLMClient
from intentrank.service import Limits, ServiceSettings
from intentrank.service.auth import KeyStore
from intentrank.service.keyring import KeyRing, add_key
from intentrank.types import Document

TENANTS = ("acme", "globex", "initech")
GROUPS = ("finance", "research", "legal")
DOCS = 900
# name -> keys-file entry (its secret is made by add_key)
KEYS: dict[str, dict[str, Any]] = {
    "acme": {"tenant": "acme", "permissions": ["read", "evaluate"]},
    "acme-finance": {"tenant": "acme", "groups": ["finance", "all-staff"],
                     "permissions": ["read"]},
    "globex": {"tenant": "globex", "permissions": ["read"]},
    "globex-writer": {"tenant": "globex", "permissions": ["read", "write"]},
    "initech-research": {"tenant": "initech", "groups": ["research"],
                         "permissions": ["read", "evaluate"]},
    "admin": {"permissions": ["admin"]},
    "acme-revoked-later": {"tenant": "acme", "permissions": ["read"]},
    "globex-expiring": {"tenant": "globex", "permissions": ["read"],
                        "expires": "2030-01-01T00:00:00Z"},
}
LIMITS = Limits(max_body_bytes=200_000, max_query_chars=4_000, max_top_k=50, max_turns=4,
                max_candidates=8, max_candidate_chars=4_000)


def tenant_of(row: int) -> dict[str, Any]:
    """The access metadata of the ``row``-th document: tenant by row, one group by row, and
    every seventh also ``all-staff``."""
    acl = [GROUPS[(row // 3) % 3]] + (["all-staff"] if row % 7 == 0 else [])
    return {"tenant": TENANTS[row % 3], "acl": acl}


def tenant_docs(data_dir: Path, n: int = DOCS) -> list[Document]:
    from intentrank.data.dataset import load_dataset

    corpus = load_dataset(data_dir / "scifact").corpus()
    return [replace(d, metadata={**d.metadata, **tenant_of(i)})
            for i, d in enumerate(itertools.islice(corpus, n))]


def tenant_index(data_dir: Path, base: Path) -> Any:
    """The index of :func:`tenant_docs` (all legs), under the session's base temp directory
    (built by the first test module that asks, reused by the others)."""
    from intentrank.index import Index, build_index

    where = base / "scifact-tenants"
    if Index.exists(where):
        return Index.open(where)
    return build_index(tenant_docs(data_dir), where)


def sees(key: str, metadata: dict[str, Any]) -> bool:
    """The oracle: whether key ``key`` may see a document with ``metadata`` (the rule of
    docs/security.md, written out, not through the filters code)."""
    entry = KEYS[key]
    if "tenant" in entry and metadata.get("tenant") != entry["tenant"]:
        return False
    return "groups" not in entry or bool(set(entry["groups"]) & set(metadata.get("acl", ())))


def make_keys(path: Path) -> dict[str, str]:
    """A keys file with :data:`KEYS`; name -> the plain key."""
    return {name: add_key(path, {"name": name, **entry}) for name, entry in KEYS.items()}


def settings_for(index: Any, keys: KeyRing | KeyStore, llm: ScriptedLLM, root: Path,
                 **extra: Any) -> ServiceSettings:
    """The service over ``index``: retrieval pipelines of every leg, a conversation
    pipeline, an answering pipeline (the scripted LLM, every prompt recorded) and the
    bundled cross-encoder as the reranker."""
    pipelines = {"bm25": "bm25", "dense": "dense", "rrf": "rrf", "tfidf": "tfidf",
                 "graph": "graph", "conversation": ["concat_turns", {"bm25": {"depth": 20}}],
                 "qa": ["bm25", {"cutoff": 5},
                        {"answer": {"top_k": 3, "abstain": "llm", "cite": "llm"}}]}
    return ServiceSettings(**{
        "indexes": {"scifact": index}, "pipelines": pipelines, "keys": keys, "limits": LIMITS,
        "report_dirs": [root], "access_log": root / "access.jsonl",
        "llm": LLMClient(llm, cache=False, retries=0), "workers": 2, "queue_limit": 64,
        **extra})


def fingerprint(text: str, words: int = 12) -> str:
    """The opening words of a passage, whitespace-normalised: how a prompt is searched for
    a document (prompts show passages as their first words, normalised)."""
    return " ".join(text.split()[:words])
