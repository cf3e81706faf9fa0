"""`rl.lock.yaml` in the project folder: what `rl init` found (the environment's image, its tools)
and the tasks dataset `rl hf` wrote last (`primary_dataset`), so that `rl --config x.yaml` needs
no `--dataset` and tasks without `mcp_config` reach the environment's server.

    version: '1.0'
    image: my-env:latest
    primary_dataset: {name: my-org/my-tasks, task_count: 8, updated_at: '2026-11-25T04:00:00Z'}
"""

import time
from pathlib import Path
from typing import Any

from rlcore.errors import ConfigError
from rlcore.files import atomic_write_text

LOCK_FILE = Path("rl.lock.yaml")
DATASETS_ROOT = Path("data/datasets")
"""Where `rl hf` writes a dataset named ORG/NAME (`data/datasets/ORG/NAME`)."""


def read_yaml(path: Path, what: str) -> dict[str, Any]:
    """A YAML mapping from `path`; a syntax error names the file, line and column."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{what} {path}: cannot read it ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path} is not UTF-8 text: save it as UTF-8") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ConfigError(f"{path}{where}: YAML syntax error: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must be a mapping of keys, got {type(data).__name__}")
    return data


def write_yaml(path: Path, data: dict[str, Any], header: str = "") -> None:
    """`data` as YAML, multi-line strings as `|` blocks (a system prompt reads as written)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, value: str):
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    dumped = yaml.dump(data, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=100)
    atomic_write_text(path, header + dumped)


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
