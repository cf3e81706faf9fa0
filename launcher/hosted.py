"""The hosted single-file format (`rl @ config.toml` with a top-level `model` string,
`batch_size`, `rollouts_per_example`, `[sampling]`, `[[env]]`, `[eval]` + `[[eval.env]]`,
`[wandb]`), read as this project's composed config: orchestrator keys move under
`[orchestrator]`, `model = "..."` becomes `model.name`. Both forms may be mixed; a key set in
both places with different values is an error naming both."""

import sys
from typing import Any

ORCHESTRATOR_KEYS = ("batch_size", "rollouts_per_example", "sampling", "env", "eval")


def from_hosted(data: dict) -> dict:
    """`data` with hosted top-level keys moved where this project reads them (in place)."""
    moved = []
    if isinstance(data.get("model"), str):
        data["model"] = {"name": data["model"]}
        moved.append("model -> model.name")
    for key in ORCHESTRATOR_KEYS:
        if key not in data:
            continue
        value = data.pop(key)
        orchestrator = data.setdefault("orchestrator", {})
        if isinstance(orchestrator, dict):
            merge_into(orchestrator, key, value, f"orchestrator.{key}", key)
        moved.append(f"{key} -> orchestrator.{key}")
    if moved:
        print(f"rl: note: single-file keys read as {', '.join(moved)}", file=sys.stderr)
    return data


def merge_into(target: dict, key: str, value: Any, where: str, top: str) -> None:
    """Set target[key] = value, merging tables leaf by leaf; different leaves are an error."""
    if key not in target:
        target[key] = value
        return
    if isinstance(value, dict) and isinstance(target[key], dict):
        for sub, sub_value in value.items():
            merge_into(target[key], sub, sub_value, f"{where}.{sub}", f"{top}.{sub}")
        return
    if target[key] != value:
        raise ValueError(
            f"`{top}` = {value!r} (top level) and `{where}` = {target[key]!r} disagree: set it "
            "in one place, or make them equal"
        )
