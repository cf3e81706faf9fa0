"""What `rl` does with literal secrets in what it is given: the processes get them in their
environment (`externalize`: a `$RL_SECRET_...` reference stands in the configs it writes, which
still reproduce the run, and the process resolves it: rlcore.secrets.resolve), and the files it
writes for a project (rl.lock.yaml, workflow YAMLs, tasks datasets) hold none at all:
`literal_secrets` finds them and `refuse_literal_secrets` refuses them with the fix. Where a
secret sits (a secret-named key's value or `static` value, a secret-named `--flag VALUE` in a
list, a URL's user info or secret-named query value) and which names are secret are
rlcore.secrets'."""

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rlcore.config.toml_io import write_config
from rlcore.errors import ConfigError
from rlcore.secrets import Slot, map_secrets

SECRET_ENV_PREFIX = "RL_SECRET_"
_ANY_REFERENCE = re.compile(r"\$\{\w+\}|\$\w+")


def externalize(data: Any, prefix: str) -> tuple[Any, dict[str, str]]:
    """Literal secrets replaced by `$RL_SECRET_<PREFIX>_<PATH>` references (`${...}` inside a
    URL), and the environment that carries their values (named after where each one sits,
    never after its value)."""
    env: dict[str, str] = {}

    def literal(slot: Slot) -> str:
        if slot.reference:
            return slot.value
        words = [prefix, *slot.path, *([slot.name] if slot.in_url else [])]
        base = (SECRET_ENV_PREFIX + re.sub(r"\W+", "_", "_".join(map(str, words)))).upper()
        name, number = base, 1
        while env.get(name, slot.value) != slot.value:  # two secrets in one string
            number += 1
            name = f"{base}_{number}"
        env[name] = slot.value
        return f"${{{name}}}" if slot.in_url else f"${name}"

    return map_secrets(data, literal), env


def is_literal(value: Any) -> bool:
    """A non-empty string with no `$VAR` in it: what a secret slot must not hold in a file `rl`
    writes (`Bearer $TOKEN` is a reference, `Bearer sk-...` is not)."""
    return isinstance(value, str) and bool(value) and _ANY_REFERENCE.search(value) is None


def literal_secrets(data: Any) -> Iterator[tuple[tuple, str, str]]:
    """(path, what, a name for its variable) of every literal secret in nested dicts and lists
    (rlcore.secrets: a secret-named key's or its `static` value, a secret-named `--flag VALUE`
    in a list, a URL's user info or secret-named query value), unless it has a `$VAR` in it."""
    found: list[tuple[tuple, str, str]] = []

    def collect(slot: Slot) -> str:
        if is_literal(slot.value):
            found.append((slot.path, slot.what, slot.name))
        return slot.value

    map_secrets(data, collect)
    return iter(found)


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


def write_for_child(
    config: BaseModel | dict[str, Any], path: Path, prefix: str = ""
) -> dict[str, str]:
    """Write the resolved config a child process will read, each literal secret replaced by a
    reference; the environment that gives the child their values (rl sft's `sft`, evals' own
    inference server), so the child never reads the `***` a redacted file would hold."""
    data = config.model_dump(mode="json") if isinstance(config, BaseModel) else config
    data, env = externalize(data, prefix)
    write_config(data, path)
    return env
