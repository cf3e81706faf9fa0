"""Secrets in configs: a value under a key named like a secret (`api_key`, `hf_token`,
`password`, `client_secret`, ...) in free-form tables (`[[env]].args`, `vllm_args`) is never
written to a resolved config, a log or W&B: it shows as `***`. A `$VAR` reference in its place
stays as written and is resolved only inside the process that uses it, from its environment
(and `.env`). `redact_url(s)` takes a URL's secrets out of messages. What `rl` alone does with
literal secrets (passing them by environment, refusing them in files it writes) is in
launcher/literal_secrets.py."""

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
URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]*[^\s'\"<>`.,:;)\]]")
"""A URL in free text (an error message), without the punctuation that ends a sentence."""


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


def scrub(text: str, data: Any) -> str:
    """`text` with every secret value found in `data` replaced by `***` (for error messages
    that quote what a library said about its arguments)."""
    for _, value in secret_leaves(data):
        text = text.replace(value, REDACTED)
    return text


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
    return URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
