"""The `@` command line shared by `rl`, `trainer`, `orchestrator` and `inference`.

    trainer @ a.toml @ b.toml --optim.lr 1e-5
    rl --trainer @ t.toml --orchestrator @ o.toml --inference @ i.toml --max-steps 10

Precedence: defaults < `@` files (left to right, deep-merged, lists replaced) < flags.
"""

import json
import math
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from rlcore.config.base import MAX_INT, note_renamed
from rlcore.config.schema import (
    classes_at,
    did_you_mean,
    find_leaf,
    is_kind,
    keys_under,
    leaves,
    union_tags,
)
from rlcore.config.toml_io import load_toml
from rlcore.errors import ConfigError
from rlcore.files.user_files import MAX_NESTING, check_nesting, too_deep

COMMAND_FLAGS = {"help", "dry_run", "json_schema", "print_config", "clean"}
MAX_PROBLEMS_SHOWN = 10
"""Problems with a config named one by one (an unknown key with its did-you-mean); the rest are
counted in a line."""


@dataclass
class Source:
    """Where a value came from: a file and the key inside it, or a flag."""

    label: str
    key: str

    def describe(self) -> str:
        return f"{self.label}, key `{self.key}`" if self.label.endswith(".toml") else self.label


@dataclass
class ParsedArgs:
    data: dict[str, Any] = field(default_factory=dict)
    sources: dict[tuple[str, ...], Source] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    positionals: list[str] = field(default_factory=list)


def deep_merge(base: dict, update: dict) -> dict:
    """Merge `update` into `base` (in place): tables merge, everything else is replaced."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = value
    return base


def _record(sources: dict, data: Any, prefix: tuple[str, ...], label: str, key_prefix: str) -> None:
    if isinstance(data, dict) and data:
        for key, value in data.items():
            _record(sources, value, (*prefix, key), label, key_prefix)
        return
    inner = ".".join(prefix)[len(key_prefix) :].lstrip(".")
    sources[prefix] = Source(label, inner or ".".join(prefix))


def _normalize(key: str) -> str:
    return key.replace("-", "_")


def _normalize_keys(data: Any) -> Any:
    if isinstance(data, dict):
        return {_normalize(k): _normalize_keys(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_normalize_keys(v) for v in data]
    return data


def _literal(text: str) -> Any:
    """A flag value as TOML would read it (numbers, booleans, arrays, tables), else the string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        pass
    try:
        return json.loads(text)
    except ValueError:
        return text


def _list_value(tokens: list[str]) -> list[str]:
    items: list[str] = []
    for token in tokens:
        items += [p.strip() for p in token.strip("[]").split(",") if p.strip()]
    return items


def _flag_value(annotation: Any, tokens: list[str], flag: str) -> Any:
    if len(tokens) == 1 and tokens[0] in ("None", "null"):
        return tokens[0]
    if is_kind(annotation, (list, tuple)):
        parsed = _literal(tokens[0]) if len(tokens) == 1 else None
        return parsed if isinstance(parsed, list) else _list_value(tokens)
    if len(tokens) != 1:
        raise ConfigError(f"{flag} takes one value, got {len(tokens)}: {' '.join(tokens)}")
    if is_kind(annotation, (dict,)) or annotation is Any:
        return _literal(tokens[0])
    return tokens[0]


def _set_path(data: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        nxt = data.get(key)
        if not isinstance(nxt, dict):
            nxt = data[key] = {}
        data = nxt
    data[path[-1]] = value


M = TypeVar("M", bound=BaseModel)


class ArgParser(Generic[M]):
    """Parses argv against a config class; `sections` are sub-configs taking `--name @ file`."""

    def __init__(self, model: type[M], prog: str, sections: tuple[str, ...] = ()):
        self.model = model
        self.prog = prog
        self.sections = sections
        self.flag_names = ["--" + leaf.dotted.replace("_", "-") for leaf in leaves(model)]

    def parse(self, argv: list[str], first: Sequence[tuple[dict, str]] = ()) -> ParsedArgs:
        """`first`: layers (data, label) below every file and flag of `argv`, e.g. a workflow
        config already translated to this config's keys."""
        out = ParsedArgs()
        for data, label in first:
            check_nesting(data, label)
        layers: list[tuple[dict, str, tuple[str, ...]]] = [
            (_normalize_keys(data), label, ()) for data, label in first
        ]
        overrides: list[tuple[tuple[str, ...], Any, str]] = []
        i = 0
        while i < len(argv):
            token = argv[i]
            if token.startswith("@"):
                name = token[1:] or (argv[i + 1] if i + 1 < len(argv) else "")
                i += 1 if token[1:] else 2
                layers.append((self._load(name, "@"), name, ()))
                continue
            if token in ("-h", "--help"):
                out.flags.add("help")
                i += 1
                continue
            if not token.startswith("--"):
                out.positionals.append(token)
                i += 1
                continue
            key = _normalize(token[2:].split("=", 1)[0])
            values: list[str] = [token.split("=", 1)[1]] if "=" in token else []
            i += 1
            if key in self.sections and not values and i < len(argv) and argv[i].startswith("@"):
                while i < len(argv) and argv[i].startswith("@"):  # `--trainer @ a @ b`: both
                    name = argv[i][1:] or (argv[i + 1] if i + 1 < len(argv) else "")
                    i += 1 if argv[i][1:] else 2
                    layers.append((self._load(name, f"--{key} @"), name, (key,)))
                continue
            if key in COMMAND_FLAGS and not values:
                out.flags.add(key)
                continue
            while "=" not in token and i < len(argv) and not argv[i].startswith(("--", "@")):
                values.append(argv[i])
                i += 1
            overrides.append(self._override(key, values))
        for data, label, prefix in layers:
            nested = data
            for part in reversed(prefix):
                nested = {part: nested}
            deep_merge(out.data, nested)
            _record(out.sources, nested, (), label, ".".join(prefix))
        for path, value, flag in overrides:
            _set_path(out.data, path, value)
            out.sources[path] = Source(f"flag {flag}", ".".join(path))
            self._flag_beats_section_files(out, path)
        return out

    def _flag_beats_section_files(self, out: ParsedArgs, path: tuple[str, ...]) -> None:
        """A top-level flag (`rl --max-steps 50`) overrides the same key that a section's file
        set (`max_steps = 30` in train.toml): flags outrank files. Two files, or two flags, that
        disagree stay an error."""
        if not self.sections or path[0] in self.sections:
            return
        for section in self.sections:
            full = (section, *path)
            source = out.sources.get(full)
            if source is None or source.label.startswith("flag "):
                continue
            parent = out.data.get(section)
            for key in path[:-1]:
                parent = parent.get(key) if isinstance(parent, dict) else None
            if isinstance(parent, dict):
                parent.pop(path[-1], None)
                out.sources.pop(full)

    def _load(self, name: str, where: str) -> dict:
        if not name or name.startswith("--"):
            raise ConfigError(f"`{where}` must be followed by a TOML file, e.g. {where} train.toml")
        return _normalize_keys(load_toml(Path(name)))

    def _override(self, key: str, values: list[str]) -> tuple[tuple[str, ...], Any, str]:
        flag = "--" + key.replace("_", "-")
        if key.count(".") >= MAX_NESTING:
            raise ConfigError(too_deep(_shortened(flag)))
        path = renamed_path(self.model, tuple(key.split(".")))
        leaf = find_leaf(self.model, path)
        negated = None
        if leaf is None and key.startswith("no_"):
            negated = find_leaf(self.model, tuple(key[3:].split(".")))
        if negated is not None and is_kind(negated.annotation, (bool,)) and not values:
            return negated.path, False, flag
        is_table = any(f.startswith(flag + ".") for f in self.flag_names)
        if leaf is None and is_table and values in (["None"], ["null"]):
            return path, values[0], flag
        if leaf is None and is_table and len(values) == 1 and f"{flag}.name" in self.flag_names:
            return (*path, "name"), values[0], flag  # `--model M` is `--model.name M`
        if leaf is None and is_table and not values and f"{flag}.enabled" in self.flag_names:
            # prime-rl's bare `--ckpt`: switch the table on
            note_renamed(flag, f"{flag}.enabled true")
            return (*path, "enabled"), True, flag
        if leaf is None:
            raise ConfigError(
                f"unknown flag {_shortened(flag)}{did_you_mean(flag, self.flag_names)}; "
                f"see `{self.prog} --help` for all flags"
            )
        if not values:
            if is_kind(leaf.annotation, (bool,)):
                return path, True, flag
            raise ConfigError(f"{flag} needs a value, e.g. {flag} <value>")
        try:
            value = _flag_value(leaf.annotation, values, flag)
        except RecursionError:  # tomllib and json recurse into nested values
            raise ConfigError(too_deep(flag)) from None
        check_nesting(value, flag, depth=len(path) + 1)
        return path, value, flag

    def validate(self, parsed: ParsedArgs) -> M:
        """Build the config; a validation error becomes one ConfigError naming file or flag."""
        found = raw_value_problems(self.model, parsed.data)
        problems = [
            f"`{_dotted(path)}` = {_shown(value)}{self._where(parsed, path)}: {problem}"
            for path, value, problem in found[:MAX_PROBLEMS_SHOWN]
        ]
        if len(found) > MAX_PROBLEMS_SHOWN:
            problems.append(f"and {len(found) - MAX_PROBLEMS_SHOWN:,} more such values")
        if problems:
            raise ConfigError("\n".join(problems))
        try:
            return self.model.model_validate(parsed.data)
        except ValidationError as err:
            raise ConfigError(self._explain(err, parsed)) from None

    def _where(self, parsed: ParsedArgs, path: tuple[str, ...]) -> str:
        for n in range(len(path), 0, -1):
            source = parsed.sources.get(path[:n])
            if source:
                return f" ({source.describe()})"
        return ""

    def _explain(self, err: ValidationError, parsed: ParsedArgs) -> str:
        """One line per problem: a shared key's error, repeated by every component that
        carries it, is said once (where it was set, if known). Past the first
        MAX_PROBLEMS_SHOWN problems (an unknown key with its did-you-mean), one line counts
        the rest, so that thousands of them cost linear time and a short message."""
        tags = union_tags(self.model)
        lines: dict[tuple, str] = {}
        more_unknown: dict[tuple, str] = {}
        more_other: dict[tuple, str] = {}
        for error in err.errors():
            loc = tuple(str(p) for p in error["loc"] if not isinstance(p, int))
            loc = tuple(p for p in loc if p not in tags)
            shared = loc[1:] if self.sections and loc and loc[0] in self.sections else loc
            key = (shared, error["type"], str(error.get("input")))
            if key not in lines and len(lines) >= MAX_PROBLEMS_SHOWN:
                more = more_unknown if error["type"] == "extra_forbidden" else more_other
                more.setdefault(key, _dotted(loc))
                continue
            line = self._explain_one(error, loc, parsed)
            if key not in lines or (" (" not in lines[key] and " (" in line):
                lines[key] = line
        text = "\n".join(dict.fromkeys(lines.values()))
        for more, what in ((more_unknown, "unknown keys"), (more_other, "problems")):
            if more:
                examples = ", ".join(f"`{_shortened(k)}`" for k in list(more.values())[:3])
                text += (
                    f"\nand {len(more):,} more {what}, e.g. at {examples}: see "
                    f"`{self.prog} --help` for the valid keys and values"
                )
        return text

    def _explain_one(self, error: ErrorDetails, loc: tuple[str, ...], parsed: ParsedArgs) -> str:
        if error["type"] == "value_error" and isinstance(error.get("input"), dict):
            return self._explain_rule(error, loc, parsed)
        source, shown_loc = self._source(loc, parsed)
        where = f" ({source.describe()})" if source else ""
        dotted = ".".join(shown_loc)
        if error["type"] == "extra_forbidden":
            parent, name = loc[:-1], loc[-1]
            choices = keys_under(self.model, parent)
            hint = did_you_mean(name, choices) or f" (valid keys here: {', '.join(choices)})"
            kinds = [
                c.model_fields["type"].default
                for c in classes_at(self.model, parent)
                if name in c.model_fields and "type" in c.model_fields
            ]
            if kinds:  # a key of another member of a tagged union
                types = " or ".join(map(repr, kinds))
                return (
                    f"`{dotted}`{where} is a key of `{'.'.join(shown_loc[:-1])}.type` = {types} "
                    f"only: set that type too, or drop `{name}`"
                )
            return f"unknown key `{dotted}`{where}{hint}"
        if error["type"] == "union_tag_invalid":
            ctx = error.get("ctx", {})
            return (
                f"`{dotted}.type` = {ctx.get('tag')!r}{where} is not one of the types here: use "
                f"one of {ctx.get('expected_tags')}"
            )
        if error["type"] == "union_tag_not_found":
            kinds = [
                c.model_fields["type"].default
                for c in classes_at(self.model, loc)
                if "type" in c.model_fields
            ]
            return f"`{dotted}`{where} needs `type`: one of {', '.join(map(repr, kinds))}"
        message = error["msg"].removeprefix("Value error, ")
        if not loc:
            return self._explain_rule(error, loc, parsed)
        value = error.get("input")
        shown = f" = {value!r}" if not isinstance(value, dict | list) else ""
        return f"`{dotted}`{shown}{where}: {message}"

    def _explain_rule(self, error: ErrorDetails, table: tuple[str, ...], parsed: ParsedArgs) -> str:
        """A rule across a table's keys (a config class's validator): the table, the message,
        and where each key the message names was set, with its value. No single key of the
        table is blamed (it was its first key set, whatever the rule was about)."""
        message = error["msg"].removeprefix("Value error, ")
        places = []
        for path, source in self._named_keys(message, table, parsed).items():
            value = _value_at(parsed.data, path)
            shown = f" = {_shown(value)}" if value is not None else ""
            places.append(f"`{_dotted(path)}`{shown} from {source.describe()}")
        where = f" [{'; '.join(places)}]" if places else ""
        return f"`{_dotted(table)}`: {message}{where}" if table else message + where

    def _named_keys(
        self, message: str, table: tuple[str, ...], parsed: ParsedArgs
    ) -> dict[tuple[str, ...], Source]:
        """The keys set in files or flags that `message` names (snake or kebab case, or as a
        `[table]`): inside `table`, or shared keys set at the top level."""
        found: dict[tuple[str, ...], Source] = {}
        for path, source in parsed.sources.items():
            if path[: len(table)] == table:
                relative = path[len(table) :]
            elif self.sections and path and path[0] not in self.sections:
                relative = path  # a shared key, filled into the components
            else:
                continue
            shortest = 2 if not table and path[0] in self.sections else 1  # not "the trainer"
            for n in range(len(relative), shortest - 1, -1):
                if _mentions(message, relative[:n]):
                    found.setdefault(path[: len(path) - len(relative) + n], source)
                    break
        return found

    def _source(
        self, loc: tuple[str, ...], parsed: ParsedArgs
    ) -> tuple[Source | None, tuple[str, ...]]:
        """Where the value at `loc` was set, and the key to show: a shared key set once at the
        top level (or by a top-level flag) is shown there, once, not per component."""
        # A shared key set at the top level is validated inside each component that uses it.
        shared = loc[1:] if self.sections and loc and loc[0] in self.sections else None
        for path in (loc, shared) if shared else (loc,):
            for n in range(len(path), 0, -1):
                source = parsed.sources.get(path[:n])
                if source:
                    return source, path
            inside = [s for p, s in parsed.sources.items() if p[: len(path)] == path]
            if path and inside:  # the value is a table; one of its keys was set
                return inside[0], path
        return None, loc


def _mentions(message: str, key: tuple[str, ...]) -> bool:
    """Whether `message` names the dotted `key` as a word, in snake or kebab case."""
    dotted = ".".join(key)
    for name in {dotted, dotted.replace("_", "-")}:
        if re.search(rf"(?:(?<=--)|(?<![\w.-])){re.escape(name)}(?![\w-]|\.\w)", message):
            return True
    return False


def _value_at(data: Any, path: tuple[str, ...]) -> Any:
    """The scalar given at `path` in the parsed data (None for a table, a list or nothing)."""
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return None if isinstance(data, dict | list) else data


def _shortened(text: str, limit: int = 80) -> str:
    """`text` for a message: at most `limit` characters, the cut marked."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dotted(path: tuple[str, ...]) -> str:
    """`orchestrator.env[0].args.x` for a path through a list of tables."""
    return "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in path).lstrip(".")


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def raw_value_problems(
    model: type[BaseModel], data: Any, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Any, str]]:
    """Values given in files or flags that no config may hold, found before validation (which
    would quietly turn `true` into 1): nan and inf anywhere, booleans where a number is
    expected, integers beyond MAX_INT."""
    if isinstance(data, dict):
        items = [((*path, str(k)), v) for k, v in data.items()]
    elif isinstance(data, list):
        items = [((*path, str(i)), v) for i, v in enumerate(data)]
    else:
        return _scalar_problems(model, data, path)
    return [p for sub, value in items for p in raw_value_problems(model, value, sub)]


def _scalar_problems(model: type[BaseModel], data: Any, path: tuple[str, ...]) -> list:
    if isinstance(data, float) and not math.isfinite(data):
        return [(path, data, "not a finite number: give a finite value")]
    leaf = find_leaf(model, path) if isinstance(data, bool | str) else None
    annotation = None if leaf is None else leaf.annotation
    numeric = annotation is not None and is_kind(annotation, (int, float))
    if isinstance(data, bool) and numeric and not is_kind(annotation, (bool,)):
        return [(path, data, "expected a number, got a boolean")]
    if isinstance(data, str) and numeric and re.fullmatch(r"[+-]?\d+", data.strip()):
        data = int(data)
    if isinstance(data, int) and not isinstance(data, bool) and abs(data) > MAX_INT:
        return [(path, data, f"out of range: no value here exceeds {MAX_INT}")]
    return []


def renamed_path(model: type[BaseModel], path: tuple[str, ...]) -> tuple[str, ...]:
    """`path` with another tool's key names (a config class's `renamed`) replaced by ours."""
    out: list[str] = []
    for key in path:
        for cls in classes_at(model, tuple(out)):
            new = getattr(cls, "renamed", {}).get(key)
            if new is not None:
                note_renamed(".".join((*out, key)), ".".join((*out, new)))
                key = new
                break
        out.append(key)
    return tuple(out)
