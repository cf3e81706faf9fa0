"""Walking config schemas: which keys exist, their types and docs (for flags, help, errors)."""

import difflib
import functools
import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined


@dataclass
class Leaf:
    """One settable key of a config: its dotted path, type and field."""

    path: tuple[str, ...]
    annotation: Any
    field: FieldInfo

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


def _strip(annotation: Any) -> Any:
    if get_origin(annotation) is Annotated:
        return _strip(get_args(annotation)[0])
    return annotation


def union_members(annotation: Any) -> list[Any]:
    """The types a field can hold, None left out; nested unions (an optional tagged union)
    flattened."""
    annotation = _strip(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return [member for a in args for member in union_members(a)]
    return [annotation]


def model_members(annotation: Any) -> list[type[BaseModel]]:
    """Config classes a field can hold (several for a tagged union)."""
    return [
        a for a in union_members(annotation) if isinstance(a, type) and issubclass(a, BaseModel)
    ]


def is_kind(annotation: Any, kinds: tuple[type, ...]) -> bool:
    return any(a in kinds or get_origin(a) in kinds for a in union_members(annotation))


def leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[Leaf]:
    """Every settable key, depth first; a nested config contributes its own keys."""
    out: list[Leaf] = []
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        members = model_members(field.annotation)
        if members and not is_kind(field.annotation, (list,)):
            seen: set[str] = set()
            for member in members:
                for leaf in leaves(member, path):
                    if leaf.dotted not in seen:
                        seen.add(leaf.dotted)
                        out.append(leaf)
        else:
            out.append(Leaf(path, field.annotation, field))
    return out


@functools.cache
def _leaves_of(model: type[BaseModel]) -> tuple[Leaf, ...]:
    return tuple(leaves(model))


def find_leaf(model: type[BaseModel], path: tuple[str, ...]) -> Leaf | None:
    """The leaf at `path`, or the dict/list field that contains it; None if no such key."""
    for leaf in _leaves_of(model):
        if leaf.path == path:
            return leaf
        if leaf.path == path[: len(leaf.path)] and is_kind(leaf.annotation, (dict,)):
            return leaf
    return None


def did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=3, cutoff=0.6)
    if not close:
        last = word.split(".")[-1]
        close = [c for c in choices if c.split(".")[-1] == last][:3]
    return f" (did you mean {', '.join(close)}?)" if close else ""


def keys_under(model: type[BaseModel], path: tuple[str, ...]) -> list[str]:
    """Names valid directly under `path` (for did-you-mean on unknown keys); list items (e.g.
    `[[env]]` tables) are walked into."""
    names: set[str] = set()
    for cls in classes_at(model, path):
        names.update(cls.model_fields)
    return sorted(names)


def classes_at(model: type[BaseModel], path: tuple[str, ...]) -> list[type[BaseModel]]:
    """The config classes a value at `path` may be (several for a tagged union)."""
    current = [model]
    for key in path:
        found: list[type[BaseModel]] = []
        for cls in current:
            field = cls.model_fields.get(key)
            if field is None:
                continue
            for member in union_members(field.annotation):
                if get_origin(member) is list:
                    found += model_members(get_args(member)[0])
                elif isinstance(member, type) and issubclass(member, BaseModel):
                    found.append(member)
        current = found
    return current


def default_text(field: FieldInfo) -> str:
    if field.default is PydanticUndefined:
        return "required"
    value = field.default
    if isinstance(value, BaseModel):
        return ""
    return repr(value) if isinstance(value, str) else str(value)


def type_text(annotation: Any) -> str:
    """A short readable type: `int | None`, `list[int]`, `'a' | 'b'`."""
    annotation = _strip(annotation)
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return " | ".join(type_text(a) for a in get_args(annotation))
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(annotation))
    if origin is not None:
        inner = ", ".join(type_text(a) for a in get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def rename_deep(model: type[BaseModel], data: Any, path: tuple[str, ...] = ()) -> Any:
    """Apply every config class's `renamed` keys throughout `data` (in place), so that other
    tools' key names are ours before anything compares or fills keys."""
    from rlcore.config.base import apply_renames

    if isinstance(data, list):
        for item in data:
            rename_deep(model, item, path)
        return data
    if not isinstance(data, dict):
        return data
    for cls in classes_at(model, path)[:1]:
        apply_renames(cls, data)
    for key, value in data.items():
        rename_deep(model, value, (*path, key))
    return data


@functools.cache
def union_tags(model: type[BaseModel]) -> frozenset[str]:
    """The `type` tags of every tagged union under `model` (pydantic puts them in error
    locations, between a field and its keys)."""
    return frozenset(_union_tags(model, set()))


def _union_tags(model: type[BaseModel], seen: set) -> set[str]:
    if model in seen:
        return set()
    seen.add(model)
    tags: set[str] = set()
    for field in model.model_fields.values():
        members = model_members(field.annotation)
        for member in members:
            kind = member.model_fields.get("type")
            if len(members) > 1 and kind is not None and isinstance(kind.default, str):
                tags.add(kind.default)
            tags |= _union_tags(member, seen)
    return tags
