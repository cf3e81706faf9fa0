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

_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")
_BARE_VALUE = re.compile(r"^\s*[\w.\-\"]+\s*=\s*([A-Za-z][^\"'\[{#]*?)\s*(#.*)?$")


def load_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; a missing file or bad syntax is a ConfigError naming file:line:col."""
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist: check the path after `@`")
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory: pass a .toml file after `@`")
    text = read_utf8(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(_syntax_message(path, text, err)) from None


def read_utf8(path: Path) -> str:
    """The file's text; bytes that are not UTF-8 are a ConfigError naming file, line, column
    and the byte."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ConfigError(
            f"{path}:{line}:{column}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
            f"{err.start}): TOML files must be UTF-8; save it as UTF-8 in your editor"
        ) from None


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
