"""Request and response bodies of the service (pydantic; they make the OpenAPI schema)."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from intentrank.types import StageTrace


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnIn(_Model):
    """An earlier turn of a conversation."""

    question: str = Field(description="What the user asked.")
    answer: str = Field("", description="What the system answered (optional).")


class ConversationIn(_Model):
    """A conversation: the earlier turns, oldest first, and the question to answer now."""

    turns: list[TurnIn] = Field(default_factory=list)
    question: str


class SearchRequest(_Model):
    """A query (``query``) or a conversation (``conversation``), exactly one of them."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"query": "ALDH1 expression in breast cancer", "pipeline": "rrf", "top_k": 5},
        {"conversation": {"turns": [{"question": "What is ALDH1?",
                                     "answer": "A marker of stem-like cancer cells."}],
                          "question": "Is it expressed in breast cancer?"},
         "pipeline": "bm25", "top_k": 3},
    ]})

    query: str | None = Field(None, description="The question (or give `conversation`).")
    conversation: ConversationIn | None = None
    index: str | None = Field(None, description="An index name from GET /pipelines "
                                                "(default: the first).")
    pipeline: str | None = Field(None, description="A pipeline name from GET /pipelines.")
    top_k: int = Field(10, ge=1, description="How many results to return.")
    include_text: bool = Field(True, description="Return each passage's text.")
    filter: str | None = Field(None, description="A metadata filter (e.g. `year >= 2020 AND "
                                                 "source = \"handbook\"`); ANDed with your "
                                                 "key's scope, it can only narrow it.")


class CandidateIn(_Model):
    """One of the user's own passages."""

    id: str | None = Field(None, description="Its id (default c1, c2, ... in order).")
    text: str
    title: str = ""


class RerankRequest(_Model):
    """Rerank the user's candidate passages for a query with a reranker."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"query": "Does vitamin D reduce fractures?", "pipeline": "cross_encoder",
         "candidates": [{"id": "a", "text": "Vitamin D supplementation did not reduce hip "
                                           "fractures in older adults."},
                        {"id": "b", "text": "Aspirin lowers the risk of colorectal cancer."}]},
    ]})

    query: str
    candidates: list[CandidateIn] = Field(min_length=1)
    pipeline: str | None = Field(None, description="A reranker name from GET /pipelines.")
    top_k: int | None = Field(None, ge=1, description="How many results to return "
                                                      "(default: all).")


class EvaluateRequest(_Model):
    """A TREC run (``qid Q0 docid rank score tag``) and qrels (TREC or BEIR TSV) as text."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"run": "1 Q0 d1 1 2.0 demo\n1 Q0 d2 2 1.0 demo\n2 Q0 d3 1 1.5 demo\n",
         "qrels": "1 0 d2 1\n2 0 d3 2\n", "metrics": ["nDCG@10", "MRR@10"]},
    ]})

    run: str
    qrels: str
    metrics: list[str] = Field(default_factory=lambda: ["nDCG@10", "MRR@10", "MAP@100",
                                                        "Recall@100", "P@10"])
    per_query: bool = False


class DerivedOut(BaseModel):
    kind: str
    text: str
    stage: str


class ResultOut(BaseModel):
    """A ranked passage with every stage's score and its rank in that stage's list."""

    rank: int
    doc_id: str
    score: float
    title: str = ""
    source: str = Field("", description="`file › section (page N)` for a passage read from "
                                         "a folder; empty otherwise.")
    text: str = ""
    stage_scores: dict[str, float] = Field(default_factory=dict)
    stage_ranks: dict[str, int] = Field(default_factory=dict)


def _stage_trace_fields() -> dict[str, Any]:
    """:class:`~intentrank.types.StageTrace`'s fields as pydantic field definitions (``name``
    called ``stage``), its counters last: what the service reports of a stage is that record,
    with the LLM counts that clients read most lifted out of its counters."""
    hints = get_type_hints(StageTrace)
    out: dict[str, Any] = {}
    for f in fields(StageTrace):
        default = (Field(default_factory=f.default_factory)
                   if f.default_factory is not MISSING else
                   ... if f.default is MISSING else f.default)
        out["stage" if f.name == "name" else f.name] = (hints[f.name], default)
    counters = out.pop("counters")
    return {**out, "llm_calls": (int, 0), "cache_hits": (int, 0), "fallbacks": (int, 0),
            "counters": counters}


StageTraceOut = create_model("StageTraceOut", __doc__="What one stage cost in this request.",
                             **_stage_trace_fields())


class EventOut(BaseModel):
    stage: str
    event: str
    query_id: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class CitationOut(BaseModel):
    """A numbered source the answer cites: ``[n]`` in the text is ``doc_id``."""

    n: int
    doc_id: str
    source: str = Field("", description="Where it comes from, as shown to a reader: `file › "
                                         "section (page N)` for a passage read from a folder, "
                                         "else its id.")
    title: str = ""
    text: str
    support: str = Field("", description="The passage sentence that supports the answer "
                                         "(post-hoc citations), else its opening words.")


class AnswerOut(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"text": "Yes: ALDH1 marks stem-like cells in breast tumours [1].",
         "citations": [{"n": 1, "doc_id": "4983", "text": "ALDH1 is a marker ..."}],
         "fallback": "", "stage": "answer"},
    ]})

    text: str
    citations: list[CitationOut] = Field(default_factory=list)
    fallback: str = Field("", description="Why the reply was not used as written; empty "
                                          "when it was.")
    stage: str = ""
    unsupported: list[str] = Field(default_factory=list, description="Answer sentences no "
                                   "given passage supports (post-hoc citations).")


class SearchResponse(BaseModel):
    request_id: str
    index: str | None
    pipeline: str
    query: str = Field(description="The user's question (the last turn).")
    searched: str = Field(description="The text the pipeline searched (a rewrite, for a "
                                      "conversational pipeline).")
    derived: list[DerivedOut] = Field(default_factory=list)
    results: list[ResultOut]
    stages: list[StageTraceOut]
    events: list[EventOut] = Field(default_factory=list)
    fallbacks: int = 0
    seconds: float
    answer: AnswerOut | None = None
    generation: str | None = Field(None, description="The index generation that answered "
                                                     "(one per request, never a mix).")


class AnswerResponse(SearchResponse):
    answer: AnswerOut  # type: ignore[assignment]


class EvaluateResponse(BaseModel):
    metrics: dict[str, float]
    queries: int = Field(description="Judged queries averaged over.")
    skipped: list[str] = Field(default_factory=list, description="Queries with no relevant "
                                                                 "document (not averaged).")
    per_query: dict[str, dict[str, float]] | None = None


class IndexInfo(BaseModel):
    name: str
    documents: int


class PipelineInfo(BaseModel):
    name: str
    kind: str = Field(description="search (over an index) or rerank (over your passages)")
    description: str
    answers: bool = Field(description="Whether POST /answer can use it.")
    allowed: bool = Field(description="Whether your key may use it.")


class PipelinesResponse(BaseModel):
    indexes: list[IndexInfo]
    pipelines: list[PipelineInfo]
    default_pipeline: str
    limits: dict[str, int]


class HealthResponse(BaseModel):
    status: str
    indexes: int
    pipelines: int
    in_flight: int
    workers: int
    queue_limit: int
    generations: dict[str, str | None] = Field(
        default_factory=dict, description="Index name -> the generation served now.")
    reloads: int = Field(0, description="Generation switches since start-up.")
    reload_errors: int = 0
    clusters: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Index name -> the state of a cluster index (shards on Ray actors): "
                    "generation, shards, replicas (shard, replica, state, host, "
                    "generation), hosts, replication (full | degraded | unknown).")


class ReportInfo(BaseModel):
    name: str
    bytes: int


class ErrorOut(BaseModel):
    error: str
    request_id: str = ""


# -- the providers' APIs: Cohere rerank, OpenAI embeddings --------------------------------
class _Compatible(BaseModel):
    """A body of another provider's API: fields this service does not use are accepted and
    ignored, so newer client versions that send more keep working."""

    model_config = ConfigDict(extra="ignore")


class CohereRerankRequest(_Compatible):
    """Cohere's rerank body (v1 and v2): a query and documents (strings, or objects whose
    ``text``, or ``rank_fields``, is read)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [
        {"model": "cross_encoder", "query": "Does vitamin D reduce fractures?",
         "documents": ["Vitamin D supplementation did not reduce hip fractures in older "
                       "adults.", "Aspirin lowers the risk of colorectal cancer."],
         "top_n": 1, "return_documents": True},
    ]})

    model: str | None = Field(None, description="A reranker name from GET /pipelines (kind "
                                                "rerank; default: the first).")
    query: str
    documents: list[str | dict[str, Any]] = Field(
        description="The passages, as strings or objects with a `text` string (other fields "
                    "are returned as given with `return_documents`).")
    top_n: int | None = Field(None, description="How many results (default: all).")
    return_documents: bool = Field(False, description="Return each result's document.")
    rank_fields: list[str] | None = Field(
        None, description="The fields of an object document read, in order, joined by a "
                          "space (default: `text`); a string document is read as is.")
    max_chunks_per_doc: int | None = Field(None, description="Accepted, not used: the "
                                           "reranker clips passages to its max_length.")
    max_tokens_per_doc: int | None = Field(None, description="Accepted, not used: the "
                                           "reranker clips passages to its max_length.")


class CohereApiVersion(BaseModel):
    version: str


class CohereBilledUnits(BaseModel):
    search_units: int = Field(description="One per 100 documents, as Cohere counts them; "
                                          "nothing is billed.")


class CohereMeta(BaseModel):
    api_version: CohereApiVersion
    billed_units: CohereBilledUnits


class CohereRerankResult(BaseModel):
    index: int = Field(description="The document's position in the request.")
    relevance_score: float = Field(description="The reranker's score (the bundled "
                                               "cross-encoder's is in [0, 1]).")
    document: dict[str, Any] | None = Field(
        None, description="With `return_documents`: `{text}` for a string, the object "
                          "as given for an object.")


class CohereRerankResponse(BaseModel):
    id: str = Field(description="The request id (also the X-Request-ID header).")
    results: list[CohereRerankResult] = Field(description="Best first.")
    meta: CohereMeta


class CohereErrorOut(ErrorOut):
    message: str = Field(description="The error, where Cohere's clients look for it.")


class EmbeddingsRequest(_Compatible):
    """OpenAI's embeddings body: texts encoded by a served index's dense query encoder."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [
        {"model": "scifact", "input": ["ALDH1 expression in breast cancer"],
         "encoding_format": "float"},
    ]})

    model: str | None = Field(None, description="An index name from GET /pipelines whose "
                                                "dense leg encodes (default: the first).")
    input: str | list[str] | list[int] | list[list[int]] = Field(
        description="A text or a list of texts (token ids are refused).")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="`base64`: little-endian float32 bytes, base64-encoded.")
    dimensions: int | None = Field(None, description="If given, must be the model's "
                                                     "dimension (no truncation).")
    user: str | None = Field(None, description="Accepted, not used.")


class EmbeddingOut(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingsUsage(BaseModel):
    prompt_tokens: int = Field(description="Tokens the encoder read (after clipping).")
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingOut]
    model: str
    usage: EmbeddingsUsage


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorOut(BaseModel):
    error: OpenAIErrorDetail
    request_id: str = ""


# -- documents (write permission) ---------------------------------------------------------
class DocumentIn(_Model):
    """A document to add or replace (by id)."""

    id: str = Field(min_length=1, max_length=200)
    text: str
    title: str = ""
    parent_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict, description="Fields filters match "
                                     "(a scoped key's documents must match its scope).")


class UpsertRequest(_Model):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"index": "docs", "documents": [{"id": "handbook#1", "text": "Expenses are ...",
                                         "metadata": {"tenant": "acme", "acl": ["finance"]}}]},
    ]})

    index: str | None = Field(None, description="An index name (default: the first).")
    documents: list[DocumentIn] = Field(min_length=1)


class DeleteRequest(_Model):
    """Delete by ids, by a filter, or both (a document either names is deleted)."""

    index: str | None = None
    ids: list[str] | None = None
    filter: str | None = Field(None, description="A metadata filter; ANDed with the key's "
                                                 "scope.")


class UpdateResponse(BaseModel):
    request_id: str = ""
    index: str
    added: int = 0
    replaced: int = 0
    unchanged: int = 0
    deleted: int = 0
    seconds: float = 0.0
    generation: str | None = None
