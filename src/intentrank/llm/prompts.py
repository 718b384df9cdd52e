"""Prompts as contracts: one YAML file per prompt in ``intentrank/prompts/<name>.yaml`` (or
in the prompt directory of an installed plugin, :func:`plugin_contracts`).

A contract says everything about one LLM step except the stage's own logic: the messages
(optional ``system``, the user ``template`` with ``{slot}``s, few-shot ``examples``), the
decoding (``max_tokens``, ``temperature``, ``stop``, ``logprobs``), how the reply is read
(``parser``, a name in :data:`intentrank.llm.parsing.PARSERS`; optional JSON ``schema`` for
constrained decoding) and what the stage does when that fails (``fallback``, a sentence).
See ``docs/prompts.md`` for the format. :func:`load_contract` validates a file and raises a
:class:`~intentrank.errors.ConfigError` naming the file and the field for a bad one.

Slots are ``{name}`` with ``name`` an identifier; every other brace (JSON in an example) is
text. Filling is one pass, so a value that contains ``{query}`` is not filled again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from intentrank.core.registry import plugin_prompt_dirs
from intentrank.errors import ConfigError
from intentrank.llm.base import Message

_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_EXAMPLES = "examples"  # the slot inline examples go into
_JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
_FIELDS = {"description", "system", "template", "examples", "examples_as", "example_template",
           "example_separator", "max_tokens", "temperature", "stop", "logprobs", "parser",
           "parser_options", "schema", "fallback"}


def slots(template: str) -> list[str]:
    """The ``{slot}`` names of a template, in order of first appearance."""
    return list(dict.fromkeys(_SLOT.findall(template)))


def fill(template: str, values: Mapping[str, Any]) -> str:
    """Fill every ``{slot}`` in one pass; a slot without a value raises KeyError."""
    missing = [s for s in slots(template) if s not in values]
    if missing:
        raise KeyError(f"no value for {', '.join('{' + m + '}' for m in missing)}")
    return _SLOT.sub(lambda m: str(values[m.group(1)]), template)


@dataclass(frozen=True)
class Example:
    """One few-shot example: the assistant ``reply`` to the template filled with ``vars``,
    or (``examples_as: turns`` only) to a literal ``user`` text."""

    reply: str
    vars: Mapping[str, Any] = field(default_factory=dict)
    user: str | None = None


@dataclass(frozen=True)
class PromptContract:
    """A validated prompt file; :meth:`messages` renders it, :meth:`params` gives the
    decoding parameters for :meth:`~intentrank.llm.client.LLMClient.chat`."""

    name: str
    template: str
    system: str | None = None
    examples: tuple[Example, ...] = ()
    examples_as: str = "inline"  # "inline": into the template's {examples}; "turns": chat turns
    example_template: str | None = None
    example_separator: str = "\n\n"
    max_tokens: int = 256
    temperature: float = 0.0
    stop: tuple[str, ...] | None = None
    logprobs: int = 0
    parser: str = "text"
    parser_options: Mapping[str, Any] = field(default_factory=dict)
    schema: Mapping[str, Any] | None = None
    fallback: str = ""
    description: str = ""
    source: str = ""

    @property
    def inline(self) -> bool:
        return self.examples_as == "inline"

    def examples_text(self) -> str:
        """The inline examples block (empty with no examples or with chat-turn examples)."""
        if not self.inline or not self.examples:
            return ""
        assert self.example_template is not None  # checked on load
        return self.example_separator.join(
            fill(self.example_template, {**ex.vars, "reply": ex.reply}) for ex in self.examples)

    def render(self, **values: Any) -> str:
        """The user message: the template with every slot filled (KeyError names a missing
        one); values for names that are not slots are ignored."""
        if self.inline and _EXAMPLES in slots(self.template):
            values = {**values, _EXAMPLES: self.examples_text()}
        try:
            return fill(self.template, values)
        except KeyError as exc:
            raise KeyError(f"prompt {self.name!r}: {exc.args[0]}") from None

    def messages(self, **values: Any) -> list[Message]:
        """System message (if any), few-shot turns (``examples_as: turns``), the user message."""
        out: list[Message] = [{"role": "system", "content": self.system}] if self.system else []
        if not self.inline:
            for ex in self.examples:
                text = ex.user if ex.user is not None else self.render(**{**values, **ex.vars})
                out += [{"role": "user", "content": text},
                        {"role": "assistant", "content": ex.reply}]
        out.append({"role": "user", "content": self.render(**values)})
        return out

    def params(self, *, structured: bool = False, **overrides: Any) -> dict[str, Any]:
        """Decoding parameters for ``LLMClient.chat``; ``structured`` adds ``json_schema``
        (the contract must have a ``schema``). ``overrides`` (e.g. a stage's ``max_tokens``)
        replace the contract's values; None leaves a value as the contract has it."""
        params: dict[str, Any] = {"max_tokens": self.max_tokens,
                                  "temperature": self.temperature,
                                  "stop": list(self.stop) if self.stop else None,
                                  "logprobs": self.logprobs}
        params.update({k: v for k, v in overrides.items() if v is not None})
        if structured:
            if self.schema is None:
                raise ConfigError(f"prompt {self.name!r} ({self.source}) has no schema for "
                                  f"structured output")
            params["json_schema"] = dict(self.schema)
        return params

    def parse(self, text: str, **options: Any) -> Any:
        """The reply read by the contract's parser (with ``parser_options``, then
        ``options``): the value, a ``Repaired`` value, or ``ParseError``."""
        from intentrank.llm.parsing import PARSERS

        return PARSERS[self.parser](text, **{**self.parser_options, **options})


# --- loading and validation -------------------------------------------------------------------


def _bad(where: str, fieldname: str, problem: str) -> ConfigError:
    return ConfigError(f"{where}: field {fieldname!r}: {problem}")


def _text(where: str, name: str, value: Any, *, optional: bool = False,
          empty: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _bad(where, name, f"must be text, got {_kind(value)}")
    if not empty and not value.strip():
        raise _bad(where, name, "must not be empty")
    return value


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"[:80]


def _int(where: str, name: str, value: Any, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(where, name, f"must be a whole number, got {_kind(value)}")
    if not minimum <= value <= maximum:
        raise _bad(where, name, f"must be in [{minimum}, {maximum}], got {value}")
    return value


def _check_schema(where: str, name: str, schema: Any) -> None:
    """The parts of a JSON schema constrained decoding relies on (no full meta-schema)."""
    if not isinstance(schema, dict):
        raise _bad(where, name, f"must be a mapping (a JSON schema), got {_kind(schema)}")
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if kind is not None and not all(k in _JSON_TYPES for k in kinds):
        raise _bad(where, f"{name}.type", f"must be one of {sorted(_JSON_TYPES)}, got "
                                          f"{kind!r}")
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        raise _bad(where, f"{name}.properties", "must be a mapping of property schemas")
    for key, sub in props.items():
        _check_schema(where, f"{name}.properties.{key}", sub)
    required = schema.get("required", [])
    if not isinstance(required, list) or any(r not in props for r in required):
        raise _bad(where, f"{name}.required",
                   f"must list names among the properties {sorted(props)}, got {required!r}")
    if "items" in schema:
        _check_schema(where, f"{name}.items", schema["items"])
    for bound in ("minimum", "maximum", "minItems", "maxItems"):
        value = schema.get(bound)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise _bad(where, f"{name}.{bound}", f"must be a number, got {_kind(value)}")


def parse_contract(data: Any, name: str, where: str) -> PromptContract:
    """A :class:`PromptContract` from the mapping of a prompt file, or ConfigError."""
    from intentrank.llm.parsing import PARSERS

    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a prompt file must be a mapping of fields, got "
                          f"{_kind(data)}")
    unknown = sorted(set(map(str, data)) - _FIELDS)
    if unknown:
        raise _bad(where, unknown[0], f"unknown field (known: {', '.join(sorted(_FIELDS))})")
    if "template" not in data:
        raise _bad(where, "template", "is required (the user message with {slots})")
    template = _text(where, "template", data["template"])
    assert template is not None
    system = _text(where, "system", data.get("system"), optional=True)
    examples_as = data.get("examples_as", "inline")
    if examples_as not in ("inline", "turns"):
        raise _bad(where, "examples_as", f"must be 'inline' or 'turns', got {examples_as!r}")
    example_template = _text(where, "example_template", data.get("example_template"),
                             optional=True)
    separator = _text(where, "example_separator", data.get("example_separator", "\n\n"),
                      empty=True)
    raw_examples = data.get("examples") or []
    if not isinstance(raw_examples, list):
        raise _bad(where, "examples", f"must be a list of examples, got {_kind(raw_examples)}")
    examples = []
    for i, ex in enumerate(raw_examples):
        at = f"examples[{i}]"
        if not isinstance(ex, dict):
            raise _bad(where, at, f"must be a mapping with 'reply' and 'vars' or 'user', got "
                                  f"{_kind(ex)}")
        extra = sorted(set(map(str, ex)) - {"reply", "vars", "user"})
        if extra:
            raise _bad(where, f"{at}.{extra[0]}", "unknown field (known: reply, vars, user)")
        if "reply" not in ex:
            raise _bad(where, f"{at}.reply", "is required (the assistant's answer)")
        reply = _text(where, f"{at}.reply", ex["reply"])
        user = _text(where, f"{at}.user", ex.get("user"), optional=True)
        variables = ex.get("vars") or {}
        if not isinstance(variables, dict):
            raise _bad(where, f"{at}.vars", f"must be a mapping of slot values, got "
                                            f"{_kind(variables)}")
        if (user is None) == (not variables):
            raise _bad(where, at, "needs exactly one of 'vars' (slot values) and 'user' (text)")
        if user is not None and examples_as == "inline":
            raise _bad(where, f"{at}.user", "inline examples are written by example_template "
                                            "from 'vars'; use examples_as: turns for 'user'")
        examples.append(Example(str(reply), {str(k): v for k, v in variables.items()}, user))
    template_slots = slots(template)
    if examples_as == "inline" and examples:
        if example_template is None:
            raise _bad(where, "example_template", "is required for inline examples (how one "
                                                  "example is written, with {reply})")
        if _EXAMPLES not in template_slots:
            raise _bad(where, "template", "has no {examples} slot for the inline examples")
        for i, ex in enumerate(examples):
            missing = [s for s in slots(example_template) if s != "reply" and s not in ex.vars]
            if missing:
                raise _bad(where, f"examples[{i}].vars",
                           f"has no value for example_template's {{{missing[0]}}}")
    elif _EXAMPLES in template_slots and examples_as == "turns":
        raise _bad(where, "template", "has an {examples} slot but examples_as is 'turns'")
    max_tokens = _int(where, "max_tokens", data.get("max_tokens", 256), 1, 32768)
    temperature = data.get("temperature", 0.0)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not (
            0.0 <= temperature <= 2.0):
        raise _bad(where, "temperature", f"must be a number in [0, 2], got {_kind(temperature)}")
    stop = data.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or not all(
            isinstance(s, str) and s for s in stop)):
        raise _bad(where, "stop", f"must be a list of non-empty texts, got {_kind(stop)}")
    logprobs = _int(where, "logprobs", data.get("logprobs", 0), 0, 20)
    parser = data.get("parser", "text")
    if parser not in PARSERS:
        raise _bad(where, "parser", f"unknown parser {parser!r} (known: "
                                    f"{', '.join(sorted(PARSERS))})")
    options = data.get("parser_options") or {}
    if not isinstance(options, dict):
        raise _bad(where, "parser_options", f"must be a mapping, got {_kind(options)}")
    schema = data.get("schema")
    if schema is not None:
        _check_schema(where, "schema", schema)
        schema = {"title": name, **schema}  # the name OpenAI-style servers want
    fallback = _text(where, "fallback", data.get("fallback", ""), empty=True)
    description = _text(where, "description", data.get("description", ""), empty=True)
    return PromptContract(
        name=name, template=template, system=system, examples=tuple(examples),
        examples_as=examples_as, example_template=example_template,
        example_separator=str(separator), max_tokens=max_tokens,
        temperature=float(temperature), stop=tuple(stop) if stop else None,
        logprobs=logprobs, parser=parser, parser_options=options, schema=schema,
        fallback=str(fallback), description=str(description), source=where)


def shipped_contracts() -> list[str]:
    """Names of the prompt contracts shipped in ``intentrank/prompts``."""
    folder = resources.files("intentrank").joinpath("prompts")
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir()
                  if p.name.endswith(".yaml"))


@cache
def plugin_contracts() -> dict[str, tuple[str, Any]]:
    """Prompt name -> (entry point name, file) for the ``<name>.yaml`` files of installed
    prompt plugins (entry point group ``intentrank.prompts``, see
    :func:`~intentrank.core.registry.plugin_prompt_dirs`), found once. A plugin prompt may
    not take a shipped prompt's name or another plugin's (ConfigError)."""
    shipped = set(shipped_contracts())
    out: dict[str, tuple[str, Any]] = {}
    for plugin, folder in plugin_prompt_dirs():
        for path in sorted(folder.iterdir(), key=lambda p: p.name):
            if not path.name.endswith(".yaml"):
                continue
            name = path.name.removesuffix(".yaml")
            if name in shipped:
                raise ConfigError(f"prompt plugin {plugin!r}: {path} takes the name of the "
                                  f"shipped prompt {name!r}; rename it")
            if name in out:
                raise ConfigError(f"prompt plugins {out[name][0]!r} and {plugin!r} both "
                                  f"define a prompt named {name!r}")
            out[name] = (plugin, path)
    return out


@cache
def _load_shipped(name: str) -> PromptContract:
    """A shipped prompt by name, else an installed plugin's."""
    path = resources.files("intentrank").joinpath("prompts", f"{name}.yaml")
    try:
        text = path.read_text("utf-8")
    except (FileNotFoundError, IsADirectoryError):
        plugins = plugin_contracts()
        if name in plugins:
            found = plugins[name][1]
            return _parse_text(found.read_text("utf-8"), name, str(found))
        extra = f"; from plugins: {', '.join(sorted(plugins))}" if plugins else ""
        raise ConfigError(f"no prompt named {name!r} in intentrank/prompts (shipped: "
                          f"{', '.join(shipped_contracts())}{extra})") from None
    return _parse_text(text, name, f"intentrank/prompts/{name}.yaml")


def _parse_text(text: str, name: str, where: str) -> PromptContract:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {exc}") from None
    return parse_contract(data, name, where)


def load_contract(name: str | Path) -> PromptContract:
    """The contract of a shipped prompt (``"followups"``) or of a ``.yaml`` file (a path).

    Raises ConfigError naming the file and the field when the contract is bad."""
    text = str(name)
    if isinstance(name, Path) or text.endswith((".yaml", ".yml")) or "/" in text:
        path = Path(text).expanduser()
        try:
            content = path.read_text("utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read prompt file {path}: {exc.strerror or exc}") from None
        return _parse_text(content, path.stem, str(path))
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", text):
        raise ConfigError(f"bad prompt name {text!r}: a shipped prompt name "
                          f"({', '.join(shipped_contracts())}) or a path to a .yaml file")
    return _load_shipped(text)


def format_passages(texts: Sequence[str], max_words: int = 150) -> str:
    """Numbered passages, ``[1] text`` (each cut to ``max_words`` words), one per line: how
    answering and citing prompts show documents (citations ``[n]`` refer to these)."""
    return "\n".join(f"[{i}] {' '.join(t.split()[:max_words])}"
                     for i, t in enumerate(texts, 1))
