"""The config reference, generated from the pydantic schemas: every key of a pipeline YAML
with its type, default, constraints and description.

The docs site renders `markdown()` at build time and `posttrain config explain KEY` prints
`explain(KEY)`, so neither can drift from the schemas. Key paths use `[]` for list items,
`<name>` for mapping keys, and name the variant of a `type:` union they belong to.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class Key:
    """One documented key: where it is, what it holds, and under which `type:` variants."""

    path: str
    type: str
    default: str
    constraints: str
    description: str
    owner: str  # the schema class that declares it
    variant: str  # e.g. "stages[] type: rl"; "" outside unions


def _strip(annotation: Any) -> Any:
    """The annotation without `Annotated[...]` wrappers."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _union_members(annotation: Any) -> list[Any]:
    annotation = _strip(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [_strip(a) for a in typing.get_args(annotation)]
    return [annotation]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def type_name(annotation: Any) -> str:
    """A short, readable type: `int`, `list[str]`, `"low" | "high"`, `RLStage | SFTStage`."""
    annotation = _strip(annotation)
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return " | ".join(repr(a).replace("'", '"') for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    if origin in (list, tuple, set, dict):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in typing.get_args(annotation))}]"
    if annotation is type(None):
        return "null"
    if annotation is Ellipsis:
        return "..."
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:  # a factory that takes the validated data
            return "(computed)"
        if isinstance(value, BaseModel):
            return "(see its keys)"
        return repr(value)
    if field.is_required():
        return "required"
    return repr(field.default)


_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def _constraints(field: FieldInfo) -> str:
    """The field's bounds, read off its constraint metadata (annotated-types' Ge, Le, MinLen...)."""
    parts = []
    for item in field.metadata:
        for attr, sign in _BOUNDS:
            if getattr(item, attr, None) is not None:
                parts.append(f"{sign} {getattr(item, attr)}")
        if getattr(item, "min_length", None) is not None:
            parts.append(f"at least {item.min_length} items")
        if getattr(item, "max_length", None) is not None:
            parts.append(f"at most {item.max_length} items")
    return ", ".join(parts)


def _describe(name: str, field: FieldInfo) -> str:
    text = field.description or ""
    if not text and name == "type" and typing.get_origin(_strip(field.annotation)) is Literal:
        return "Selects this variant."
    if not text:  # a nested schema without a field description: its class docstring
        for member in _union_members(field.annotation):
            if _is_model(member) and member.__doc__:
                return " ".join(member.__doc__.split())
    return " ".join(text.split())


def _children(annotation: Any) -> tuple[str, list[type[BaseModel]]]:
    """The path suffix (`[]`, `.<name>` or ``) and the schemas nested under a field."""
    annotation = _strip(annotation)
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, set):
        _, models = _children(typing.get_args(annotation)[0])
        return "[]", models
    if origin is dict:
        _, models = _children(typing.get_args(annotation)[1])
        return ".<name>", models
    return "", [m for m in _union_members(annotation) if _is_model(m)]


def _variant_label(model: type[BaseModel]) -> str:
    field = model.model_fields.get("type")
    if field is None or typing.get_origin(_strip(field.annotation)) is not Literal:
        return ""
    return "type: " + "|".join(str(a) for a in typing.get_args(_strip(field.annotation)))


def keys(model: type[BaseModel], prefix: str = "", variant: str = "", seen: tuple = ()) -> list[Key]:
    """Every key under `model`, depth first, in declaration order."""
    out = []
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        out.append(
            Key(
                path=path,
                type=type_name(field.annotation),
                default=_default(field),
                constraints=_constraints(field),
                description=_describe(name, field),
                owner=model.__name__,
                variant=variant,
            )
        )
        suffix, nested = _children(field.annotation)
        for child in nested:
            if child in seen:  # a recursive schema: documented once, where it first appears
                continue
            label = _variant_label(child) if len(nested) > 1 else ""
            where = f"{path}{suffix} {label}" if label else variant
            out.extend(keys(child, path + suffix, where, seen + (model,)))
    return out


def pipeline_keys() -> list[Key]:
    from posttrain.config.pipeline import PipelineConfig

    return keys(PipelineConfig)


def _normalise(path: str) -> str:
    """`stages[2].algo.clip` and `stages.algo.clip` both become `stages[].algo.clip`."""
    import re

    path = re.sub(r"\[\d*\]", "[]", path.strip())
    return path


def explain(key: str) -> list[Key]:
    """The keys a user may mean by `key`: exact matches on the normalised path (list indices
    optional), else every key whose path ends with it."""
    wanted = _normalise(key)
    every = pipeline_keys()
    exact = [k for k in every if k.path == wanted or k.path.replace("[]", "") == wanted.replace("[]", "")]
    if exact:
        return exact
    return [k for k in every if k.path.replace("[]", "").endswith("." + wanted.replace("[]", ""))]


def merged(found: list[Key]) -> list[Key]:
    """Keys that differ only in the variant that declares them, as one key naming every variant."""
    out: dict[tuple, Key] = {}
    for key in found:
        same = (key.path, key.type, key.default, key.constraints, key.description)
        if same in out and out[same].variant and key.variant:
            first = out[same]
            label = key.variant.split(" type: ")[-1]
            if label not in first.variant.split(" type: ")[-1].split("|"):
                out[same] = Key(**{**first.__dict__, "variant": f"{first.variant}|{label}"})
        else:
            out.setdefault(same, key)
    return list(out.values())


def format_key(key: Key) -> str:
    lines = [key.path + (f"   ({key.variant})" if key.variant else "")]
    lines.append(f"  type: {key.type}")
    lines.append(f"  default: {key.default}")
    if key.constraints:
        lines.append(f"  constraints: {key.constraints}")
    if key.description:
        lines.append(f"  {key.description}")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _linked(type_text: str, documented: set[str]) -> str:
    """The type with each documented schema name linked to its section."""
    import re

    def link(match: re.Match) -> str:
        name = match.group(0)
        return f"[{name}](#{name.lower()})" if name in documented else name

    return re.sub(r"[A-Za-z_][A-Za-z0-9_]*", link, _cell(type_text))


def markdown() -> str:
    """The whole reference as one Markdown page: one section per schema, in the order the
    pipeline first reaches it, each with the paths where it appears and its own keys."""
    lines = [
        "# Config reference",
        "",
        "Every key of a pipeline YAML, generated from the schemas when this site is built, so it "
        "cannot drift from the code. One section per schema; a schema that is one variant of a "
        "`type:` union is chosen by its `type` value. `[]` marks a list item and `<name>` a "
        "mapping key. `posttrain config explain KEY` prints the same for one key.",
    ]
    by_owner: dict[str, list[Key]] = {}
    for key in pipeline_keys():
        by_owner.setdefault(key.owner, []).append(key)
    documented = set(by_owner)
    for owner, owned in by_owner.items():
        fields: dict[str, Key] = {}
        places: list[str] = []
        for key in owned:
            parent, _, name = key.path.rpartition(".")
            fields.setdefault(name, key)
            where = parent or "(top level)"
            if where not in places:
                places.append(where)
        shown = ", ".join(f"`{p}`" for p in places[:6]) + (f" and {len(places) - 6} more" if len(places) > 6 else "")
        lines += ["", f"## {owner}", "", f"At {shown}.", ""]
        lines += ["| key | type | default | constraints | description |", "|---|---|---|---|---|"]
        for name, key in fields.items():
            default = f"`{_cell(key.default)}`"
            row = (f"`{name}`", _linked(key.type, documented), default, _cell(key.constraints), _cell(key.description))
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
