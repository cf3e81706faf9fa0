"""Secrets in configs: a value under a key named like a secret (`api_key`, `hf_token`,
`password`, `client_secret`, ...) in free-form tables (`[[env]].args`, `vllm_args`) is never
written to a resolved config, a log or W&B: it shows as `***`. A `$VAR` reference in its place
stays as written and is resolved only inside the process that uses it, from its environment
(and `.env`). `rl` passes a literal secret to the processes in their environment the same way
(`externalize`), so the configs it writes still reproduce the run."""

import os
import re
from collections.abc import Iterator
from typing import Any

from rlcore.errors import ConfigError

REDACTED = "***"
SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "credential"}
NAMING_WORDS = {"var", "env", "file", "path"}
"""A key whose last word is one of these names where a secret lives, not the secret."""
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_REFERENCE = re.compile(r"^\$\{(\w+)\}$|^\$(\w+)$")
SECRET_ENV_PREFIX = "RL_SECRET_"


def is_secret_key(name: str) -> bool:
    words = [w.lower() for w in _WORD.findall(str(name))]
    return bool(words) and words[-1] not in NAMING_WORDS and bool(SECRET_WORDS & set(words))


def is_reference(value: Any) -> bool:
    return isinstance(value, str) and _REFERENCE.match(value) is not None


def secret_leaves(data: Any, path: tuple = ()) -> Iterator[tuple[tuple, str]]:
    """(path, value) of every literal secret string in nested dicts and lists."""
    if isinstance(data, dict):
        for key, value in data.items():
            if is_secret_key(key) and isinstance(value, str) and value and not is_reference(value):
                yield (*path, key), value
            else:
                yield from secret_leaves(value, (*path, key))
    elif isinstance(data, list | tuple):
        for index, value in enumerate(data):
            yield from secret_leaves(value, (*path, index))


def redact(data: Any) -> Any:
    """A copy of `data` with every literal secret replaced by `***`."""
    if isinstance(data, dict):
        return {
            k: REDACTED
            if is_secret_key(k) and isinstance(v, str) and v and not is_reference(v)
            else redact(v)
            for k, v in data.items()
        }
    if isinstance(data, list | tuple):
        return [redact(v) for v in data]
    return data


def resolve(data: Any, where: str, env: dict[str, str] | None = None) -> Any:
    """A copy of `data` with `$VAR` references under secret keys replaced by their values from
    the environment (or `.env`); a variable that is not set is a ConfigError naming it."""
    if isinstance(data, dict):
        return {k: _resolve_one(v, f"{where}.{k}", env) if is_secret_key(k) else
                resolve(v, f"{where}.{k}", env) for k, v in data.items()}  # fmt: skip
    if isinstance(data, list | tuple):
        return [resolve(v, f"{where}[{i}]", env) for i, v in enumerate(data)]
    return data


def _resolve_one(value: Any, where: str, env: dict[str, str] | None) -> Any:
    match = _REFERENCE.match(value) if isinstance(value, str) else None
    if match is None:
        return value
    name = match.group(1) or match.group(2)
    env = {**dotenv(), **os.environ} if env is None else env
    if name not in env:
        raise ConfigError(f"{where} = {value!r}: ${name} is not set: export it or put it in .env")
    return env[name]


def dotenv(path: str = ".env") -> dict[str, str]:
    """KEY=VALUE lines of `.env` in the working folder (never logged)."""
    values: dict[str, str] = {}
    if os.path.isfile(path):
        with open(path) as handle:
            for line in handle.read().splitlines():
                key, sep, value = line.strip().partition("=")
                if sep and not key.startswith("#"):
                    values[key.removeprefix("export ").strip()] = value.strip().strip("'\"")
    return values


def externalize(data: Any, prefix: str) -> tuple[Any, dict[str, str]]:
    """Literal secrets replaced by `$RL_SECRET_<PREFIX>_<PATH>` references, and the environment
    that carries their values (named after where each one sits, never after its value)."""
    env: dict[str, str] = {}

    def walk(value: Any, path: tuple) -> Any:
        if isinstance(value, dict):
            return {k: literal(v, (*path, k)) if is_secret_key(k) else walk(v, (*path, k))
                    for k, v in value.items()}  # fmt: skip
        if isinstance(value, list | tuple):
            return [walk(v, (*path, i)) for i, v in enumerate(value)]
        return value

    def literal(value: Any, path: tuple) -> Any:
        if not isinstance(value, str) or not value or is_reference(value):
            return walk(value, path)
        words = re.sub(r"\W+", "_", "_".join(str(p) for p in (prefix, *path)))
        name = (SECRET_ENV_PREFIX + words).upper()
        env[name] = value
        return f"${name}"

    return walk(data, ()), env


def scrub(text: str, data: Any) -> str:
    """`text` with every secret value found in `data` replaced by `***` (for error messages
    that quote what a library said about its arguments)."""
    for _, value in secret_leaves(data):
        text = text.replace(value, REDACTED)
    return text
