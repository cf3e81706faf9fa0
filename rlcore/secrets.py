"""Secrets in configs: a value under a key named like a secret (`api_key`, `hf_token`,
`password`, `client_secret`, ...) in free-form tables (`[[env]].args`, `vllm_args`) is never
written to a resolved config, a log or W&B: it shows as `***`. A `$VAR` reference in its place
stays as written and is resolved only inside the process that uses it, from its environment
(and `.env`). `rl` passes a literal secret to the processes in their environment the same way
(`externalize`), so the configs it writes still reproduce the run.

Files `rl` writes for a project (rl.lock.yaml, workflow YAMLs, tasks datasets) hold no literal
secret at all: `literal_secrets` finds them (a secret-named key's value, a URL's user info or
secret-named query value, a secret-named `--flag VALUE` in a server's args) and
`refuse_literal_secrets` refuses them with the fix. `redact_url(s)` takes them out of messages."""

import os
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from rlcore.errors import ConfigError

REDACTED = "***"
SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "credential", "auth",
                "authorization"}  # fmt: skip
NAMING_WORDS = {"var", "env", "file", "path"}
"""A key whose last word is one of these names where a secret lives, not the secret."""
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_REFERENCE = re.compile(r"^\$\{(\w+)\}$|^\$(\w+)$")
_ANY_REFERENCE = re.compile(r"\$\{\w+\}|\$\w+")
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]*[^\s'\"<>`.,:;)\]]")
"""A URL in free text (an error message), without the punctuation that ends a sentence."""
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
    """The variables `.env` in the working folder sets (never logged; rl_envs.env_file reads
    it); a file that cannot be read, is not UTF-8 or has a bad line is a ConfigError naming it
    and the line (its contents never quoted)."""
    from rl_envs.env_file import DotenvError, read_dotenv

    try:
        return read_dotenv(path)
    except DotenvError as err:
        raise ConfigError(str(err)) from None


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


def is_literal(value: Any) -> bool:
    """A non-empty string with no `$VAR` in it: what a secret-named key must not hold in a
    file `rl` writes (`Bearer $TOKEN` is a reference, `Bearer sk-...` is not)."""
    return isinstance(value, str) and bool(value) and _ANY_REFERENCE.search(value) is None


def url_secrets(url: str) -> list[tuple[str, str]]:
    """What in `url` is a literal secret, with a variable name to hold it: its user info, and
    the query values under secret-named keys (`?token=...`), unless they are `$VAR`s."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = []
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at and is_literal(userinfo):
        found.append(("its user info (user:password@)", "URL_USERINFO"))
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if is_secret_key(key) and is_literal(value):
            found.append((f"its query value `{key}`", key))
    return found


def redact_url(url: str) -> str:
    """`url` with its user info and secret-named query values shown as `***`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    userinfo, at, host = parts.netloc.rpartition("@")
    netloc = f"{REDACTED}@{host}" if at and userinfo else parts.netloc
    query = "&".join(
        f"{quote(k, safe='$')}={REDACTED if is_secret_key(k) and v else quote(v, safe='$/:')}"
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def redact_urls(text: str) -> str:
    """`text` (an error message) with every URL in it redacted (`redact_url`)."""
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


def literal_secrets(data: Any, path: tuple = ()) -> Iterator[tuple[tuple, str, str]]:
    """(path, what, a name for its variable) of every literal secret in nested dicts and lists:
    a secret-named key's string value without a `$VAR`, a URL's user info or secret-named query
    value, and the value of a secret-named `--flag VALUE` / `--flag=VALUE` in a list."""
    if isinstance(data, dict):
        for key, value in data.items():
            if is_secret_key(key) and is_literal(value):
                yield (*path, key), "a secret-named key's value", str(key)
            else:
                yield from literal_secrets(value, (*path, key))
    elif isinstance(data, list | tuple):
        for index, value in enumerate(data):
            if isinstance(value, str) and value.startswith("-"):
                flag, eq, inline = value.partition("=")
                given = inline if eq else (data[index + 1] if index + 1 < len(data) else None)
                if is_secret_key(flag.lstrip("-")) and is_literal(given):
                    yield (*path, index), f"the value of `{flag}`", flag.lstrip("-")
            yield from literal_secrets(value, (*path, index))
    elif isinstance(data, str) and "://" in data:
        for url in _URL.findall(data):
            for what, name in url_secrets(url):
                yield path, f"{what} of a URL", name


def dotted(path: tuple) -> str:
    """`mcp_config.x.env.API_KEY`, `args[2]` for a path through dicts and lists."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def refuse_literal_secrets(data: Any, where: str, destination: str) -> None:
    """A ConfigError for the first literal secret in `data` (never quoting it) with the fix:
    `destination` (a file `rl` would write) only ever holds `$VAR` references."""
    for path, what, name in literal_secrets(data):
        name = re.sub(r"\W+", "_", name).strip("_").upper() or "SECRET"
        raise ConfigError(
            f"{where}: `{dotted(path)}` holds a literal secret ({what}), which {destination} "
            f"never records: put it in .env (`{name}=...`, or export it) and write `${name}` "
            "in its place (read from the environment or .env when the server starts)"
        )
