"""Reading TOML with errors a user can act on, and writing configs that load back identically."""

import re
import tomllib
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import BaseModel

from rlcore.errors import ConfigError
from rlcore.files.atomic import atomic_write_text
from rlcore.files.user_files import MAX_NESTING, check_nesting, read_user_text, too_deep
from rlcore.secrets import REDACTED, is_secret_key, redact, redact_urls

_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")
_STRING = r"""(?:"(?:[^"\\\n]|\\.)*"?|'[^'\n]*'?)"""
"""A TOML string, its closing quote optional (the error may be that it is missing)."""
_ASSIGNMENT = re.compile(
    rf"""((?:^|[{{,])[ \t]*([\w.-]+|"[^"\n]*"|'[^'\n]*')[ \t]*=[ \t]*)({_STRING}|[^,}}{{\[]*)"""
)
"""`key = value` at a line's start or in an inline table: (everything before the value, the
key, the value: a string, or up to the next `,`, `}`, `{` or `[`). No two parts can match the
same text, so a long line costs linear time."""
_FLAG_VALUE = re.compile(rf"""(["']--?([\w.-]+)(?:["'][ \t]*,[ \t]*|=))({_STRING}|[^,\]"']*)""")
"""A flag's value in a list: `"--api-key", VALUE` or `"--api-key=VALUE"`."""
_BARE_VALUE = re.compile(r"^\s*[\w.\-\"]+\s*=\s*([A-Za-z][^\"'\[{#]*?)\s*(#.*)?$")
_KEY = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_LONG_DOTTED_KEY = re.compile(
    rf"(?:^|[{{,\[])[ \t]*{_KEY}(?:[ \t]*\.[ \t]*{_KEY}){{{MAX_NESTING},}}[ \t]*[=\]]", re.M
)
"""A key (in a table header, at a line's start or in an inline table) of more parts than
MAX_NESTING: tomllib takes time quadratic in the parts of a dotted key, so it is found in the
text first."""


def load_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file (rlcore.files.user_files: a regular file of at most 16 MiB, nested at most
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


QUOTED_LINE_CHARS = 120
"""Of the offending line a syntax error quotes: a window around the column."""


def _syntax_message(path: Path, text: str, err: tomllib.TOMLDecodeError) -> str:
    reason = _POSITION.sub("", str(err)).strip()
    match = _POSITION.search(str(err))
    if not match:
        return f"{path}: TOML syntax error: {reason}"
    line_no, col = int(match.group(1)), int(match.group(2))
    lines = text.splitlines()
    line = lines[line_no - 1] if 0 < line_no <= len(lines) else ""
    hidden = redact_urls(_hide_secret_values(line))
    shown = _window(hidden, col)
    message = f"{path}:{line_no}:{col}: TOML syntax error: {reason}\n    {shown}"
    bare = _BARE_VALUE.match(line)
    if bare and bare.group(1).strip().lower() not in ("true", "false", "inf", "nan"):
        value = bare.group(1).strip()
        if hidden != line or len(value) > QUOTED_LINE_CHARS:
            value = "..."  # a secret is never echoed, nor a page of text
        message += f'\nhint: strings must be quoted in TOML, e.g. `= "{value}"`'
    return message


def _hide_secret_values(line: str) -> str:
    """`line` with the value of each secret-named key (rlcore.secrets) in it, at its start or
    in an inline table, and of each secret-named flag in a list, shown as `***`."""

    def hide(match: re.Match) -> str:
        name = match.group(2).strip("\"'").split(".")[-1]
        if not is_secret_key(name):
            return match.group(0)
        value = match.group(3)
        return match.group(1) + REDACTED + value[len(value.rstrip()) :]

    return _FLAG_VALUE.sub(hide, _ASSIGNMENT.sub(hide, line))


def _window(line: str, col: int) -> str:
    """At most QUOTED_LINE_CHARS of `line` around column `col` (1-based), cuts marked `...`."""
    if len(line) <= QUOTED_LINE_CHARS:
        return line
    start = max(0, min(col - 1 - QUOTED_LINE_CHARS // 2, len(line) - QUOTED_LINE_CHARS))
    end = start + QUOTED_LINE_CHARS
    return ("..." if start else "") + line[start:end] + ("..." if end < len(line) else "")


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
