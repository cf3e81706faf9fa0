"""What changed between runs: their resolved configs flattened to dotted keys (`trainer.optim.lr`)
and the keys whose values differ listed side by side; and for a resumed run, its config against
the one of the attempt it resumed from where the run recorded it
(`checkpoints/step_<n>/configs/<component>.toml`, read as the run's own configs are:
launcher.view.data)."""

from typing import Any

from rlcore.files import readback
from rlcore.files.readback import Damaged

MISSING = "(not set)"


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(data, dict):
        found: dict[str, str] = {}
        for key, value in data.items():
            found |= flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return found
    return {prefix: shown(data)}


def shown(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {shown(v)}" for k, v in value.items()) + "}"
    return repr(value) if isinstance(value, str) and value != "None" else str(value)


def differences(flats: list[dict[str, str]]) -> list[dict]:
    keys = sorted(set().union(*flats))
    rows = []
    for key in keys:
        values = [flat.get(key, MISSING) for flat in flats]
        if len(set(values)) > 1:
            rows.append({"key": key, "values": values})
    return rows


def config_diff(runs: list) -> list[dict]:
    """The config keys (component.key.path) whose values differ between `runs`."""
    flats = [flatten(run.config_data()) for run in runs]
    return differences(flats)


def resume_step(run) -> int | None:
    for name in ("trainer", "orchestrator", "sft"):
        ckpt = run.config_data().get(name, {}).get("ckpt")
        step = ckpt.get("resume_step") if isinstance(ckpt, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and step != 0:
            return step
    return None


def resume_note(run) -> dict:
    """For a resumed run: the step it resumed from, and the differences between the config it
    resumed from (where recorded) and its own."""
    step = resume_step(run)
    if step is None:
        return {"name": run.name, "resumed": False}
    earlier = recorded_configs(run, step)
    if earlier is None:
        return {"name": run.name, "resumed": True, "step": step, "recorded": False}
    rows = differences([flatten(earlier), flatten(run.config_data())])
    return {"name": run.name, "resumed": True, "step": step, "recorded": True, "diff": rows}


def recorded_configs(run, step: int) -> dict | None:
    found = {}
    folder = ("checkpoints", f"step_{step}", "configs")
    for name in run.names(*folder):
        if not name.endswith(".toml"):
            continue
        try:
            found[readback.shown(name[:-5])] = run.read((*folder, name), run.read_config) or {}
        except Damaged as err:
            found[readback.shown(name[:-5])] = {"error": str(err)}
    return found or None
