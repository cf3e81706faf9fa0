"""Which environments are installed, told without importing verifiers: the check every
process (and `rl` before anything starts) runs on `[[env]]` tables. The adapters that load
and run environments are the orchestrator's (orchestrator/envs/); an environment type added
there registers its check here, in INSTALL_CHECKS."""

import importlib.util
from collections.abc import Callable
from pathlib import Path

from rlcore.errors import ConfigError

BUNDLED = "rl-add-digits, rl-repeat-word, rl-guess-number"
BUNDLED_V1 = "rl-add-digits-v1"


def module_name(env_id: str) -> str:
    """The module verifiers imports for `env_id`: dashes become underscores and an `owner/`
    prefix is dropped (`harleycooper/dakota1890` -> `dakota1890`)."""
    return env_id.replace("-", "_").split("/")[-1]


def check_classic(env_ids: list[str], where: str = "env") -> None:
    """ConfigError naming every classic environment whose module is not importable."""
    missing = [
        i for i in dict.fromkeys(env_ids) if importlib.util.find_spec(module_name(i)) is None
    ]
    if not missing:
        return
    lines = [
        f"  {i!r} (module `{module_name(i)}`): install it with "
        f"`uv pip install {i.split('/')[-1]}` or add it to the project's dependencies"
        for i in missing
    ]
    raise ConfigError(
        f"{where}: environment{'s' if len(missing) > 1 else ''} not installed:\n"
        + "\n".join(lines)
        + f"\n  (bundled environments: {BUNDLED})"
    )


def taskset_importable(env_id: str) -> bool:
    """An installed package `name`, or one of verifiers' built-in v1 tasksets."""
    name = module_name(env_id.split("@", 1)[0]).lower()
    try:
        if importlib.util.find_spec(name) is not None:
            return True
        spec = importlib.util.find_spec("verifiers")
    except (ImportError, ValueError):
        return False
    roots = spec.submodule_search_locations if spec is not None else None
    return any((Path(root) / "v1" / "tasksets" / name).is_dir() for root in roots or [])


def check_v1(env_ids: list[str], where: str) -> None:
    """ConfigError naming every v1 taskset whose package is not importable."""
    missing = [i for i in dict.fromkeys(env_ids) if not taskset_importable(i)]
    if missing:
        names = ", ".join(f"{i!r} (module `{module_name(i)}`)" for i in missing)
        raise ConfigError(
            f"{where}: verifiers v1 taskset{'s' if len(missing) > 1 else ''} not installed: "
            f"{names}; install the package that exports its Taskset (`uv pip install ...`) "
            f"(bundled v1 taskset: {BUNDLED_V1})"
        )


INSTALL_CHECKS: dict[str, Callable[[list[str], str], None]] = {
    "verifiers": check_classic,
    "v1": check_v1,
}


def check_envs(envs: list, where: str) -> None:
    """Check every `[[env]]`-like config (`type`, `id`) before anything starts."""
    for env_type in dict.fromkeys(e.type for e in envs):
        INSTALL_CHECKS[env_type]([e.id for e in envs if e.type == env_type], where)
