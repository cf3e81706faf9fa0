"""Which weight folders inference accepts, checked before any weight is touched: the folder lies
inside the run's own policy folder (`<output_dir>/weights`, or the `rl-weights-<id>` folder it
links to when that carries the run's marker), no file in it leads outside through a link, and
it holds an HF `config.json` and safetensors whose tensor names and shapes match the served
model. Both the full-weight loader (inference/weights.py) and the adapter loader
(inference/lora.py) use these checks."""

import json
import os
from pathlib import Path

from rlcore.runs.ownership import owns_weights_folder, read_run_id
from rlcore.runs.rundir import RunDir

CONFIG_FILE = "config.json"


class WeightDirError(ValueError):
    """A weight folder that cannot be loaded; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def allowed_root(run_dir: RunDir) -> Path:
    """The one folder policies may be loaded from: the run's `weights/`, resolved now (the
    trainer may have made it a link since the server started). A link is followed only to a
    folder whose marker names this run."""
    link = run_dir.weights
    if not link.is_symlink():
        return link.resolve()
    target = Path(os.path.realpath(link))
    run_id = read_run_id(run_dir.root)
    if run_id is None or not owns_weights_folder(target, run_id):
        raise WeightDirError(
            403, f"{link} links to {target}, which is not this run's policy folder"
        )
    return target


def tensor_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from the safetensors headers in `folder` (no tensor data read)."""
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(file, framework="pt") as handle:
                for name in handle.keys():  # noqa: SIM118 - safe_open is not a dict
                    shapes[name] = tuple(handle.get_slice(name).get_shape())
        except Exception as err:  # safetensors raises its own error types for corrupt files
            raise WeightDirError(422, f"{file} is not a readable safetensors file: {err}") from None
    return shapes


def check_inside(path: Path, root: Path) -> Path:
    """`path` resolved, if it is `root` or lies inside it and none of its files leads outside
    through a link; else a 403 WeightDirError."""
    resolved = path.expanduser().resolve()
    if not resolved.is_relative_to(root):
        raise WeightDirError(
            403, f"weight_dir {str(path)!r} is outside the allowed root {str(root)!r}"
        )
    if resolved.is_dir():
        for entry in resolved.iterdir():
            if entry.is_symlink() and not entry.resolve().is_relative_to(root):
                raise WeightDirError(
                    403, f"{entry} links outside the allowed root {str(root)!r}: refused"
                )
    return resolved


def check_weight_dir(path: Path, root: Path, expected: dict[str, tuple[int, ...]] | None) -> Path:
    """Validate a weight folder without loading it; returns its resolved path."""
    folder = check_inside(path, root)
    if not folder.is_dir():
        raise WeightDirError(404, f"weight_dir {str(folder)!r} does not exist or is not a folder")
    try:
        json.loads((folder / CONFIG_FILE).read_text())
    except (OSError, ValueError) as err:
        raise WeightDirError(422, f"{folder} has no valid {CONFIG_FILE}: {err}") from None
    shapes = tensor_shapes(folder)
    if not shapes:
        raise WeightDirError(422, f"{folder} holds no *.safetensors files")
    if expected:
        check_same_tensors(folder, shapes, expected)
    return folder


def check_same_tensors(
    folder: Path, shapes: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]]
) -> None:
    # A tied lm_head may be saved or left out, so it is optional on both sides.
    optional = {"lm_head.weight"}
    missing = sorted(set(expected) - set(shapes) - optional)
    extra = sorted(set(shapes) - set(expected) - optional)
    wrong = sorted(n for n in set(shapes) & set(expected) if shapes[n] != expected[n])
    problems = []
    if missing:
        problems.append(f"missing tensors {missing[:3]}{' ...' if len(missing) > 3 else ''}")
    if extra:
        problems.append(f"unexpected tensors {extra[:3]}{' ...' if len(extra) > 3 else ''}")
    if wrong:
        name = wrong[0]
        problems.append(f"{name} has shape {shapes[name]}, the served model {expected[name]}")
    if problems:
        raise WeightDirError(
            422, f"{folder} does not match the served model: " + "; ".join(problems)
        )
