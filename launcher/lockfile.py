"""`rl.lock.yaml` in the project folder: what `rl init` found (the environment's image, its tools)
and the tasks dataset `rl hf` wrote last (`primary_dataset`), so that `rl --config x.yaml` needs
no `--dataset` and tasks without `mcp_config` reach the environment's server.

    version: '1.0'
    image: my-env:latest
    primary_dataset: {name: my-org/my-tasks, task_count: 8, updated_at: '2026-11-25T04:00:00Z'}
"""

import functools
import os
import time
from pathlib import Path
from typing import Any

from rlcore.config.literal_secrets import refuse_literal_secrets
from rlcore.errors import ConfigError
from rlcore.files.atomic import atomic_write_text
from rlcore.files.paths import nearest_existing
from rlcore.files.user_files import check_nesting, read_user_text, too_deep

LOCK_FILE = Path("rl.lock.yaml")
DATASETS_ROOT = Path("data/datasets")
"""Where `rl hf` writes a dataset named ORG/NAME (`data/datasets/ORG/NAME`)."""


MAX_YAML_BYTES = 1 << 20
"""A workflow config or lock file is a few KiB; a larger one is refused unread."""


def read_yaml(path: Path, what: str) -> dict[str, Any]:
    """A YAML mapping from `path`; a syntax error names the file, line and column. Aliases
    (`*name`) are refused: a few of them nested expand into gigabytes (a "billion laughs")."""
    import yaml

    loader, alias_error = _no_alias_loader()
    text = read_user_text(path, what, MAX_YAML_BYTES)
    try:
        data = yaml.load(text, Loader=loader)  # a SafeLoader
    except RecursionError:
        raise ConfigError(too_deep(f"{what} {path}")) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        kind = "" if isinstance(err, alias_error) else "YAML syntax error: "
        raise ConfigError(f"{path}{where}: {kind}{problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must be a mapping of keys, got {type(data).__name__}")
    check_nesting(data, f"{what} {path}")
    return data


@functools.cache
def _no_alias_loader() -> tuple[type, type]:
    """yaml.SafeLoader without aliases (an `*alias` is an error at its line), and that error."""
    import yaml

    class AliasError(yaml.MarkedYAMLError):
        pass

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise AliasError(
                    problem="YAML aliases (*name) are not accepted: write the value "
                    "out where it is used",
                    problem_mark=mark,
                )
            return super().compose_node(parent, index)

    return NoAliasLoader, AliasError


def check_writable(path: Path, what: str, folder: bool = False) -> None:
    """Refuse, before anything is written, a `path` that cannot be written: a folder where a
    file goes (or a file where a folder goes), a parent that is a file, a read-only folder."""
    if not folder and path.is_dir():
        raise ConfigError(f"{what} {path} is a folder: give a file's path")
    if folder and path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {path} is a file: give a folder's path")
    parent = nearest_existing(path.absolute().parent, links=True)
    if not parent.is_dir():
        raise ConfigError(f"cannot write {what} {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"cannot write {what} {path}: {parent} is not writable (permission denied)"
        )


def write_yaml(path: Path, data: dict[str, Any], header: str = "") -> None:
    """`data` as YAML, multi-line strings as `|` blocks (a system prompt reads as written). A
    literal secret is refused (nothing written) and an OS error names the path and cause."""
    import yaml

    refuse_literal_secrets(data, str(path), str(path))

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data):
            return True

    def text(dumper, value: str):
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    dumped = yaml.dump(data, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=100)
    try:
        atomic_write_text(path, header + dumped)
    except OSError as err:
        raise ConfigError(f"cannot write {path}: {err.strerror or err}") from None


def read_lock(path: Path = LOCK_FILE) -> dict[str, Any]:
    return read_yaml(path, "the lock file") if path.exists() else {}


def update_lock(changes: dict[str, Any], path: Path = LOCK_FILE) -> dict[str, Any]:
    lock = {"version": "1.0", **read_lock(path), **changes}
    write_yaml(path, lock, "# written by rl init / rl hf; rl --config reads it\n")
    return lock


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def dataset_dir(name: str) -> Path:
    """The local folder of the tasks dataset `name` (ORG/NAME or NAME), or `name` itself when
    it is a folder."""
    if Path(name).is_dir():
        return Path(name)
    return DATASETS_ROOT / name


def primary_dataset(path: Path = LOCK_FILE) -> str | None:
    entry = read_lock(path).get("primary_dataset")
    return entry.get("name") if isinstance(entry, dict) else None
