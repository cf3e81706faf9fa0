"""What `rl` does with literal secrets in what it is given: the processes get them in their
environment (`externalize`: a `$RL_SECRET_...` reference stands in the configs it writes, which
still reproduce the run), and the files it writes for a project (rl.lock.yaml, workflow YAMLs,
tasks datasets) hold none at all: `literal_secrets` finds them (a secret-named key's value, a
URL's user info or secret-named query value, a secret-named `--flag VALUE` in a server's args)
and `refuse_literal_secrets` refuses them with the fix. Which keys are secret-named, and
redaction, are rlcore.secrets'."""

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from rlcore.errors import ConfigError
from rlcore.secrets import URL_IN_TEXT, is_reference, is_secret_key

SECRET_ENV_PREFIX = "RL_SECRET_"
_ANY_REFERENCE = re.compile(r"\$\{\w+\}|\$\w+")


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
        for url in URL_IN_TEXT.findall(data):
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
