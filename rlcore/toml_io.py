"""Reading TOML with errors a user can act on, and writing configs that load back identically."""

import re
import tomllib
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import BaseModel

from rlcore.errors import ConfigError
from rlcore.files import atomic_write_text
from rlcore.secrets import redact
from rlcore.user_files import MAX_NESTING, check_nesting, read_user_text, too_deep

_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")
_BARE_VALUE = re.compile(r"^\s*[\w.\-\"]+\s*=\s*([A-Za-z][^\"'\[{#]*?)\s*(#.*)?$")
_KEY = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_LONG_DOTTED_KEY = re.compile(
    rf"(?:^|[{{,\[])[ \t]*{_KEY}(?:[ \t]*\.[ \t]*{_KEY}){{{MAX_NESTING},}}[ \t]*[=\]]", re.M
)
"""A key (in a table header, at a line's start or in an inline table) of more parts than
MAX_NESTING: tomllib takes time quadratic in the parts of a dotted key, so it is found in the
text first."""


def load_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file (rlcore.user_files: a regular file of at most 16 MiB, nested at most
    64 levels); a missing file or bad syntax is a ConfigError naming file:line:col."""
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist: check the path after `@`")
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory: pass a .toml file after `@`")
    text = read_user_text(path, "config file")
    long_key = _LONG_DOTTED_KEY.search(text)
    if long_key:
        raise ConfigError(too_deep(f"{path}:{text.count(chr(10), 0, long_key.end()) + 1}"))
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(_syntax_message(path, text, err)) from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise ConfigError(too_deep(str(path))) from None
    check_nesting(data, str(path))
    return data


def _syntax_message(path: Path, text: str, err: tomllib.TOMLDecodeError) -> str:
    reason = _POSITION.sub("", str(err)).strip()
    match = _POSITION.search(str(err))
    if not match:
        return f"{path}: TOML syntax error: {reason}"
    line_no, col = int(match.group(1)), int(match.group(2))
    lines = text.splitlines()
    line = lines[line_no - 1] if 0 < line_no <= len(lines) else ""
    message = f"{path}:{line_no}:{col}: TOML syntax error: {reason}\n    {line}"
    bare = _BARE_VALUE.match(line)
    if bare and bare.group(1).strip().lower() not in ("true", "false", "inf", "nan"):
        value = bare.group(1).strip()
        message += f'\nhint: strings must be quoted in TOML, e.g. `= "{value}"`'
    return message


def to_toml_value(value: Any) -> Any:
    """Make a JSON-mode dump writable as TOML: None becomes the string "None"."""
    if value is None:
        return "None"
    if isinstance(value, dict):
        return {k: to_toml_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_toml_value(v) for v in value]
    return value


def dump_config(config: BaseModel | dict[str, Any]) -> str:
    """The config as TOML text; loading it back gives an identical config, except that literal
    secrets (a secret-named key's value, a URL's password or token, ...) show as `***`
    (rlcore.secrets; `$VAR` references stay). Every resolved config any entry point writes or
    prints goes through here."""
    data = config.model_dump(mode="json") if isinstance(config, BaseModel) else config
    return tomli_w.dumps(to_toml_value(redact(data)))


def write_config(config: BaseModel | dict[str, Any], path: Path) -> None:
    """Write the resolved config atomically (tmp + rename)."""
    atomic_write_text(path, dump_config(config))
