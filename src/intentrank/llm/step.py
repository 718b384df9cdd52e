"""One LLM step, written once: render a prompt contract for each item, send the batch through
the client (cached, retried, ``max_concurrency`` at a time), parse, validate, and replace every
unusable reply by the stage's typed fallback, counted and logged.

Counters (under ``stage``, besides the client's ``llm_*`` ones): ``fallbacks`` and
``fallback.<reason>`` per :class:`FallbackReason`, ``repairs`` (a reply used after a repair,
see :class:`~intentrank.llm.parsing.Repaired`). Events: one ``fallback`` event per fallback
(``reason``, ``detail``, ``query_id`` when given, the start of the reply) and one ``repair``
event per repair.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from intentrank.core.protocols import LLMLike
from intentrank.llm.base import LLMReply
from intentrank.llm.parsing import Repaired
from intentrank.llm.prompts import PromptContract, load_contract
from intentrank.types import Trace

T = TypeVar("T")

Vars = Mapping[str, Any]
ParseFn = Callable[[LLMReply, Vars], Any]
ValidateFn = Callable[[Any, Vars], Any]
FallbackFn = Callable[[Vars], Any]

# what a parser or validator may raise to say "unusable" (anything else is a bug and raises)
_UNUSABLE = (ValueError, KeyError, TypeError)
REPLY_CHARS = 200  # how much of an unusable reply an event keeps


class FallbackReason(StrEnum):
    """Why a step used its fallback (the value names the ``fallback.<reason>`` counter)."""

    LLM_FAILED = "llm_failed"  # no reply: every attempt failed (the client logged why)
    EMPTY_REPLY = "empty_reply"  # a blank reply the parser could not use
    TRUNCATED = "truncated"  # unparseable, and the reply stopped at max_tokens
    UNPARSEABLE = "unparseable"  # the parser found nothing it could read
    INVALID = "invalid"  # parsed, but the validator refused the value (e.g. weights sum)


@dataclass
class StepResult(Generic[T]):
    """What one item of a step produced: the parsed (or repaired) value with ``ok`` True, or
    the fallback with ``ok`` False and the ``reason``; ``detail`` says more (the parser's or
    validator's message, or what a repair changed)."""

    value: T
    ok: bool
    reason: FallbackReason | None = None
    detail: str = ""
    reply: LLMReply | None = None
    repaired: bool = False


def _unwrap(value: Any) -> tuple[Any, str | None]:
    return (value.value, value.detail) if isinstance(value, Repaired) else (value, None)


def _loggable(value: Any) -> Any:
    """A JSON-friendly copy of a fallback value for the event (tuples become lists)."""
    if isinstance(value, tuple | list):
        return [_loggable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value)[:REPLY_CHARS]


def judge_reply(
    reply: LLMReply | None,
    item: Vars,
    *,
    parse: ParseFn,
    validate: ValidateFn | None,
    fallback: FallbackFn,
) -> StepResult[Any]:
    """One reply through parse and validate; the fallback with its reason when unusable."""
    if reply is None:
        return StepResult(fallback(item), False, FallbackReason.LLM_FAILED,
                          "the LLM call failed")
    repairs: list[str] = []
    try:
        value, repair = _unwrap(parse(reply, item))
    except _UNUSABLE as exc:
        if not reply.text.strip():
            reason = FallbackReason.EMPTY_REPLY
        elif reply.raw.get("finish_reason") == "length":
            reason = FallbackReason.TRUNCATED
        else:
            reason = FallbackReason.UNPARSEABLE
        return StepResult(fallback(item), False, reason, _message(exc), reply)
    if repair is not None:
        repairs.append(repair)
    if validate is not None:
        try:
            value, repair = _unwrap(validate(value, item))
        except _UNUSABLE as exc:
            return StepResult(fallback(item), False, FallbackReason.INVALID, _message(exc),
                              reply)
        if repair is not None:
            repairs.append(repair)
    return StepResult(value, True, None, "; ".join(repairs), reply, bool(repairs))


def _message(exc: BaseException) -> str:
    """The reason in words: KeyError("missing 'dense'") without the quotes str() adds, and
    a bare KeyError('dense') (a lookup that failed) as "missing 'dense'"."""
    if isinstance(exc, KeyError) and exc.args:
        arg = exc.args[0]
        return arg if isinstance(arg, str) and " " in arg else f"missing {arg!r}"
    return str(exc)


def run_step(
    llm: LLMLike,
    contract: PromptContract | str,
    items: Sequence[Vars],
    *,
    fallback: FallbackFn,
    parse: ParseFn | None = None,
    validate: ValidateFn | None = None,
    trace: Trace | None = None,
    stage: str,
    query_ids: Sequence[str] | None = None,
    structured: bool = False,
    **params: Any,
) -> list[StepResult[Any]]:
    """Run ``contract`` once per item of ``items`` (the slot values of each call).

    ``llm``: an :class:`~intentrank.llm.client.LLMClient` (anything with its ``chat_many``).
    ``parse(reply, vars)`` reads a reply (default: the contract's parser on ``reply.text``);
    ``validate(value, vars)`` checks or cleans the parsed value. Both return the value, a
    :class:`~intentrank.llm.parsing.Repaired` value (used, and counted as a repair), or
    raise ``ValueError`` / ``KeyError`` / ``TypeError`` saying why the reply is unusable.
    ``fallback(vars)`` is the value used then. ``structured`` sends the contract's JSON
    schema for constrained decoding. ``params`` override the contract's decoding parameters
    (``max_tokens=...``; None keeps the contract's). ``query_ids`` (one per item) go into the
    events. Returns one :class:`StepResult` per item, in order; never raises for a bad or
    missing reply (a bad contract or missing slot raises, before any call).
    """
    if isinstance(contract, str):
        contract = load_contract(contract)
    if query_ids is not None and len(query_ids) != len(items):
        raise ValueError(f"{len(query_ids)} query ids for {len(items)} items")
    batch = [contract.messages(**item) for item in items]
    request = contract.params(structured=structured, **params)
    replies = llm.chat_many(batch, on_error="none", trace=trace, stage=stage, **request) \
        if batch else []
    parse = parse or (lambda reply, item: contract.parse(reply.text))
    results = []
    for i, (item, reply) in enumerate(zip(items, replies, strict=True)):
        result = judge_reply(reply, item, parse=parse, validate=validate, fallback=fallback)
        results.append(result)
        if trace is None:
            continue
        where = {"query_id": query_ids[i]} if query_ids is not None else {}
        if not result.ok:
            assert result.reason is not None
            trace.count(stage, "fallbacks")
            trace.count(stage, f"fallback.{result.reason.value}")
            trace.log(stage, "fallback", **where, reason=result.reason.value,
                      detail=result.detail,
                      reply=(reply.text[:REPLY_CHARS] if reply is not None else ""),
                      value=_loggable(result.value))
        elif result.repaired:
            trace.count(stage, "repairs")
            trace.log(stage, "repair", **where, detail=result.detail,
                      reply=reply.text[:REPLY_CHARS] if reply is not None else "")
    return results
