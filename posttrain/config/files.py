"""Reading pipeline files: YAML -> environment variables -> overrides -> `PipelineConfig`,
with every problem turned into one `ConfigError` line: `FILE: key.path: problem`.

String values may name environment variables, `${VAR}` or `${VAR:-default}` (the default
when VAR is unset or empty), so that one file serves machines with different paths; `$${`
is a literal `${`. The resolved config written into a run folder holds the values."""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from posttrain.config.pipeline import PipelineConfig
from posttrain.config.plugins import PluginError, import_plugins
from posttrain.config.stage_union import STAGE_SCHEMAS


class ConfigError(Exception):
    """A pipeline file that cannot be used; str() is the one line shown to the user."""


_MESSAGES = {
    "extra_forbidden": lambda e: "unknown key",
    "missing": lambda e: "required key is missing",
    "greater_than": lambda e: f"must be > {e['ctx']['gt']}",
    "greater_than_equal": lambda e: f"must be >= {e['ctx']['ge']}",
    "less_than": lambda e: f"must be < {e['ctx']['lt']}",
    "less_than_equal": lambda e: f"must be <= {e['ctx']['le']}",
    "too_short": lambda e: f"must have at least {e['ctx']['min_length']} item(s)",
    "literal_error": lambda e: f"must be one of {e['ctx']['expected']}",
    "union_tag_invalid": lambda e: f"unknown type {e['ctx']['tag']!r}; expected one of {e['ctx']['expected_tags']}",
    "union_tag_not_found": lambda e: f"needs a `{e['ctx']['discriminator'].strip(chr(39))}:` key",
}


TAGS = {  # besides the stage types (STAGE_SCHEMAS, which the stage registry may extend)
    "reasoning_gym",
    "arithmetic",
    "coding",
    "user",
    "mixture",
    "chat_jsonl",
    "grpo",
    "tis",
    "mask",
    "exclude",
    "vllm",
    "http",
    "agent",
    "writing",
    "adamw",
    "muon",
    "muon_per_head",
    "synthesis",  # also a stage type: the SFT source of a synthesis stage's set
    "hf",
    "env",
    "verifiers",
}
UNION_FIELDS = {"stages", "data", "tasks", "sources", "judge", "correction", "algo", "optimizer"}
DICT_UNION_FIELDS = {"domains"}  # {name: task source}: the key, then the source's tag


def _loc_path(loc: tuple, tags: set[str] | None = None) -> str:
    """('stages', 1, 'rl', 'lr') -> 'stages[1].lr': the tags pydantic puts after a union
    field (or after a key of a dict of unions) are dropped; a dict key stays."""
    tags = TAGS | set(STAGE_SCHEMAS) if tags is None else tags
    out = ""
    for i, part in enumerate(loc):
        prev, prev2 = (loc[i - 1] if i else None), (loc[i - 2] if i > 1 else None)
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            continue
        elif part in tags and (isinstance(prev, int) or prev in UNION_FIELDS or prev2 in DICT_UNION_FIELDS):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _describe(err: dict) -> str:
    kind = err["type"]
    if kind in _MESSAGES:
        return _MESSAGES[kind](err)
    msg = err["msg"]
    msg = re.sub(r"^(Value error|Assertion failed), ", "", msg)
    got = err.get("input")
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"{msg[0].lower()}{msg[1:]} (got {type(got).__name__} {_short(got)})"
    return msg[0].lower() + msg[1:] if msg else kind


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _members(annotation) -> list:
    """The types a (possibly Annotated, Optional or union) annotation stands for."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


def _is_model(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _tag(model) -> str | None:
    field = model.model_fields.get("type")
    args = typing.get_args(field.annotation) if field is not None else ()
    return args[0] if len(args) == 1 and isinstance(args[0], str) else None


def _step(annotation, part):
    """The annotation one step of an error location further down."""
    members = _members(annotation)
    if isinstance(part, int):
        return next((typing.get_args(m)[0] for m in members if typing.get_origin(m) in (list, tuple)), None)
    for m in members:
        if _is_model(m) and _tag(m) == part:
            return m
    for m in members:
        if _is_model(m):
            for name, field in m.model_fields.items():
                if part in (name, field.alias):
                    return field.annotation
        if typing.get_origin(m) is dict:
            return typing.get_args(m)[1]
    return None


def model_at(loc: tuple):
    """The schema (a pydantic model) at an error location, or None where it cannot be told."""
    annotation = PipelineConfig
    for part in loc:
        if part == "[key]":
            continue
        annotation = _step(annotation, part)
        if annotation is None:
            return None
    models = [m for m in _members(annotation) if _is_model(m)]
    return models[0] if len(models) == 1 else None


def _keys(model) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def _did_you_mean(word, options) -> str:
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _hint(err: dict) -> str:
    """`did you mean` for an unknown key, value or type (difflib against the schema)."""
    kind, loc = err["type"], tuple(err["loc"])
    if kind == "extra_forbidden" and err.get("missing"):  # beside a missing key: a looser match is safe
        close = difflib.get_close_matches(str(loc[-1]), [str(k) for k in err["missing"]], n=1, cutoff=0.3)
        if close:
            return f"; did you mean {close[0]!r}?"
    if kind == "extra_forbidden":
        model = model_at(loc[:-1])
        return _did_you_mean(loc[-1], _keys(model)) if model else ""
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'|(\d+)", err["ctx"]["expected"])
        return _did_you_mean(err.get("input"), [a or b for a, b in expected])
    if kind == "union_tag_invalid":
        expected = re.findall(r"'([^']*)'", err["ctx"]["expected_tags"])
        return _did_you_mean(err["ctx"]["tag"], expected)
    if kind == "union_tag_not_found" and isinstance(err.get("input"), dict):
        key = err["ctx"]["discriminator"].strip("'")
        close = difflib.get_close_matches(key, [str(k) for k in err["input"]], n=1, cutoff=0.6)
        return f"; did you mean {key!r} for {close[0]!r}?" if close else ""
    return ""


def _at_key(err: dict, path: str, problem: str) -> tuple[str, str]:
    """A model check whose message opens with one of the model's own keys (`answer_key:
    ...`) is reported at that key: `stages[0].tasks.answer_key: ...`."""
    if err["type"] != "value_error":
        return path, problem
    match = re.match(r"([A-Za-z_]\w*)((?:\.\w+|\[\d+\])*): (.+)$", problem, re.DOTALL)
    model = model_at(tuple(err["loc"])) if match else None
    if model is None or match.group(1) not in _keys(model):
        return path, problem
    key = match.group(1) + match.group(2)
    return (f"{path}.{key}" if path else key), match.group(3)


def _shown(errors: list) -> dict:
    """The error to report: the first, except that an unknown key beside a missing one is
    the typo that caused both (`step:` for `steps:`), so it is shown, with its `did you mean`."""
    first = errors[0]
    if first["type"] == "missing":
        parent = tuple(first["loc"][:-1])
        typo = [e for e in errors if e["type"] == "extra_forbidden" and tuple(e["loc"][:-1]) == parent]
        missing = [e["loc"][-1] for e in errors if e["type"] == "missing" and tuple(e["loc"][:-1]) == parent]
        return {**typo[0], "missing": missing} if typo else first
    return first


def format_validation_error(source: str, exc: ValidationError) -> str:
    """The first error of a ValidationError as `source: key.path: problem`, with a `did you
    mean` for an unknown key, value or type."""
    err = _shown(exc.errors())
    path = _loc_path(tuple(err["loc"]))
    path, problem = _at_key(err, path, _describe(err) + _hint(err))
    return f"{source}: {path}: {problem}" if path else f"{source}: {problem}"


def parse_override(text: str) -> tuple[list[str | int], Any]:
    """`stages[1].lr=1e-3` or `stages.1.lr=1e-3` -> (['stages', 1, 'lr'], 0.001)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE")
    key, raw = text.split("=", 1)
    parts: list[str | int] = []
    for piece in re.split(r"\.|(?=\[)", key.strip()):
        if not piece:
            raise ConfigError(f"override {text!r}: empty key part")
        index = re.fullmatch(r"\[(\d+)\]", piece)
        if index:
            parts.append(int(index.group(1)))
        else:
            parts.append(int(piece) if piece.isdigit() else piece)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_override(raw: dict, parts: list[str | int], value: Any, text: str) -> None:
    node: Any = raw
    for depth, part in enumerate(parts[:-1]):
        node = _child(node, part, parts[: depth + 1], text)
    last = parts[-1]
    if isinstance(node, list):
        if not isinstance(last, int) or last >= len(node):
            raise ConfigError(f"override {text!r}: no item {last} in list")
        node[last] = value
    elif isinstance(node, dict):
        node[str(last)] = value
    else:
        raise ConfigError(f"override {text!r}: {'.'.join(map(str, parts[:-1]))} is not a mapping")


def _child(node: Any, part: str | int, prefix: list, text: str) -> Any:
    if isinstance(node, list) and isinstance(part, int) and part < len(node):
        return node[part]
    if isinstance(node, dict):
        return node.setdefault(str(part), {})
    raise ConfigError(f"override {text!r}: cannot descend into {'.'.join(map(str, prefix))}")


def read_yaml(path: str | Path, environ: Mapping[str, str] | None = None) -> dict:
    """Read a pipeline file into a dict, environment variables expanded (from `environ`,
    the process's environment by default), with one-line errors for unreadable files."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read file: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: invalid YAML: {where}{problem}") from None
    if raw is None:
        raise ConfigError(f"{path}: file is empty")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(raw).__name__}")
    return expand_env(raw, str(path), environ=environ)


_ENV_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_ENV_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)


def expand_env(value: Any, source: str, path: str = "", environ: Mapping[str, str] | None = None) -> Any:
    """`value` with `${VAR}` and `${VAR:-default}` in its strings (at any depth) replaced
    from the environment; keys and non-string values are left alone."""
    environ = os.environ if environ is None else environ
    if isinstance(value, dict):
        return {k: expand_env(v, source, f"{path}.{k}" if path else str(k), environ) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, source, f"{path}[{i}]", environ) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value
    where = f"{source}: {path}" if path else source

    def one(match: re.Match) -> str:
        if match.group(0) == "$${":
            return "${"
        ref = _ENV_NAME.fullmatch(match.group(1) or "")
        if match.group(1) is None or ref is None:
            raise ConfigError(
                f"{where}: bad environment reference {match.group(0)!r}: "
                "expected ${NAME} or ${NAME:-default} (write $${ for a literal ${)"
            )
        name, default = ref.groups()
        found = environ.get(name)
        if default is not None and not found:
            return default
        if found is None:
            raise ConfigError(
                f"{where}: environment variable {name} is not set (set it, or give a default: ${{{name}:-DEFAULT}})"
            )
        return found

    return _ENV_REF.sub(one, value)


def _escape_env(value: Any) -> Any:
    """The inverse of `expand_env` on literal text: `${` -> `$${`."""
    if isinstance(value, dict):
        return {k: _escape_env(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape_env(v) for v in value]
    return value.replace("${", "$${") if isinstance(value, str) else value


def load_pipeline(
    path: str | Path, overrides: list[str] = (), environ: Mapping[str, str] | None = None
) -> PipelineConfig:
    """Parse and validate a pipeline file; raises ConfigError with one line on any problem.
    `${VAR}` references read `environ` (the process's environment by default): a caller
    with other values passes them, never writes them into the process."""
    raw = read_yaml(path, environ)
    for text in overrides:
        parts, value = parse_override(text)
        apply_override(raw, parts, value, text)
    return validate_pipeline(raw, source=str(path))


def validate_pipeline(raw: dict, source: str = "<config>") -> PipelineConfig:
    try:
        import_plugins(raw.get("plugins") if isinstance(raw, dict) else None)
    except PluginError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    try:
        return PipelineConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(source, exc)) from None


def dump_config(config: PipelineConfig) -> str:
    """The config as YAML that loads back to the same config (a literal `${` is escaped)."""
    return yaml.safe_dump(_escape_env(config.model_dump(mode="json", by_alias=True)), sort_keys=False)
