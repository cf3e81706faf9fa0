"""The run-folder promises as one matrix (rlcore.runs.runguard): every entry point that writes into
a run or an output folder, against a run another process holds, a run of another kind, a folder
that is not a run (a user's file in it) and a path that escapes through a link or `..`. Each is
refused before anything is written: a ConfigError (a command: exit 2, one line) naming the
folder, the reason and the fix, and the whole tree, byte for byte and link for link, is what it
was. A control per entry point shows the same call passes the guard on a folder it may use, so
no refusal here comes from something else.

The holder is this process holding the run's lock on a descriptor of its own (flock conflicts
between descriptors, so the entry point meets a holder exactly as it would meet another
process); separate holder processes are in tests/integration/test_runguard_processes.py."""

import json
import re
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from launcher.commands import run_command
from rlcore.errors import ConfigError
from rlcore.runs.ownership import RUN_MARKER, claim
from rlcore.runs.runguard import locked
from tests.unit.launcher.test_path_promises import release_locks, snapshot

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "examples" / "mcp_tasks" / "tasks.json"
ENTRY = {"rl": "rl", "sft": "rl sft", "eval": "evals"}
OTHER_KIND = {"rl": "sft", "sft": "eval", "eval": "rl"}


# -- the tree ---------------------------------------------------------------------------------
def make_run(root: Path, kind: str) -> Path:
    """A finished run of `kind` as its entry point leaves it (marker recording the kind,
    configs, metrics, a complete checkpoint, a policy)."""
    claim(root, kind=kind, entry=ENTRY[kind])
    (root / "configs").mkdir()
    config = {"rl": "trainer", "sft": "sft", "eval": None}[kind]
    if config:
        (root / "configs" / f"{config}.toml").write_text("")
    else:
        (root / "eval.toml").write_text("")
    (root / "metrics.jsonl").write_text(json.dumps({"component": "trainer", "step": 1}) + "\n")
    (root / "checkpoints" / "step_1" / "trainer").mkdir(parents=True)
    (root / "checkpoints" / "step_1" / "trainer" / "DONE").write_text("1\n")
    (root / "checkpoints" / "step_1" / "MANIFEST").write_text("{}\n")
    (root / "weights" / "step_1").mkdir(parents=True)
    (root / "weights" / "step_1" / "STABLE").write_text("{}\n")
    return root


@pytest.fixture
def tree(tmp_path, monkeypatch) -> Path:
    """base/outside/ (a user's folder outside everything), base/project/ (the current folder:
    the user's notes, outputs/source, an rl run to read from); returns the current folder."""
    base = tmp_path.resolve()
    (base / "outside").mkdir()
    (base / "outside" / "precious.txt").write_text("the user's own file\n")
    cwd = base / "project"
    (cwd / "outputs").mkdir(parents=True)
    (cwd / "notes.txt").write_text("the user's notes\n")
    make_run(cwd / "outputs" / "source", "rl")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(base))
    monkeypatch.delenv("RL_LAUNCHER_PID", raising=False)
    return cwd


# -- the entry points, in-process -------------------------------------------------------------
class World:
    """One CPU process (trainer.dist.World without a process group)."""

    rank, world_size, device, distributed = 0, 1, torch.device("cpu"), False
    is_main = True

    def barrier(self) -> None:
        pass

    def broadcast_object(self, value):
        return value


def rl(target: str, clean: bool = False, dry_run: bool = False) -> None:
    from launcher.preflight import check_output_dir, prepare_run_dir
    from launcher.prepare import build_plan
    from launcher.rl_config import RLConfig

    plan = build_plan(RLConfig.model_validate({"output_dir": target}), dry_run=True)
    check_output_dir(plan, clean) if dry_run else prepare_run_dir(plan, clean)


def sft_config(target: str):
    from trainer.sft.config import SFTConfig

    return SFTConfig.model_validate(
        {"output_dir": target, "data": {"name": "rows.jsonl"}, "ckpt": {"resume_step": -1}}
    )


def rl_sft(target: str) -> None:
    from launcher.sft_run import prepare
    from rlcore.runs.rundir import RunDir

    config = sft_config(target)
    prepare(RunDir(config.output_dir), config, clean=False)


def sft_alone(target: str) -> None:
    from trainer.sft.train import setup_run_dir

    setup_run_dir(sft_config(target), World())


def trainer_alone(target: str) -> None:
    from trainer.config import TrainerConfig
    from trainer.train import setup_run_dir

    setup_run_dir(TrainerConfig.model_validate({"output_dir": target}), World())


def orchestrator_alone(target: str) -> None:
    from orchestrator.config import OrchestratorConfig
    from orchestrator.loop import setup_resume
    from rlcore.runs.rundir import RunDir

    config = OrchestratorConfig.model_validate({"output_dir": target})
    setup_resume(config, RunDir(config.output_dir))


def inference_alone(target: str) -> None:
    from inference.config import InferenceConfig
    from inference.server import write_resolved_config

    write_resolved_config(InferenceConfig.model_validate({"output_dir": target}))


class ReachedServing(Exception):
    """The evaluation got past every check and its writes, to starting its server."""


def evals(target: str, watch: bool = False) -> None:
    from orchestrator.evals.config import EvalsConfig
    from orchestrator.evals.run import run
    from orchestrator.evals.watch import watch as run_watch

    source = {"watch" if watch else "run": "source"}
    config = EvalsConfig.model_validate(
        {"output_dir": target, **source, "eval": {"env": [{"id": "rl-add-digits"}]}}
    )
    (run_watch if watch else run)(config)


def command(name: str, args: Callable[[str], list[str]]) -> Callable[[str], None]:
    """A subcommand run in-process: exit 2 becomes the ConfigError it printed."""

    def call(target: str) -> None:
        import sys
        from io import StringIO

        err, sys.stderr = sys.stderr, StringIO()
        try:
            code = run_command(name, args(target))
        finally:
            err, sys.stderr = sys.stderr.getvalue(), err
        if code == 2:
            raise ConfigError(err.strip())
        assert code == 0, err

    return call


RUN_ENTRIES = {
    "rl": (rl, "rl"),
    "rl --clean": (lambda t: rl(t, clean=True), "rl"),
    "rl --dry-run": (lambda t: rl(t, dry_run=True), "rl"),
    "rl sft": (rl_sft, "sft"),
    "sft": (sft_alone, "sft"),
    "trainer": (trainer_alone, "rl"),
    "orchestrator": (orchestrator_alone, "rl"),
    "inference": (inference_alone, "rl"),
    "evals --run": (evals, "eval"),
    "evals --watch": (lambda t: evals(t, watch=True), "eval"),
}
"""Entry points that start in a run folder of their kind: (call, kind)."""
WRITERS = {
    "rl export": command("export", lambda t: ["source", "--out", t]),
    "rl plot": command("plot", lambda t: [t]),
    "rl tasks": command("tasks", lambda t: [str(TASKS), "--name", "x", "--out", t]),
    "rl init": command("init", lambda t: ["--tasks", str(TASKS), "-o", t]),
}
"""Commands that write one thing the user names (into any kind of run, under its lock)."""


@pytest.fixture(autouse=True)
def no_heavy_work(monkeypatch):
    """The parts past the guard that are not its business: the trainer's export (a process of
    its own), the MCP server's tool list (a process), evals' server."""

    def fake_export(run, step, kind, out, dtype):
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"weights")
        return "bfloat16"

    def serving(*args, **kwargs):
        raise ReachedServing

    monkeypatch.setattr("launcher.commands.export.run_export", fake_export)
    tool = {"name": "open", "description": "", "inputSchema": {}}
    monkeypatch.setattr("launcher.commands.init.list_tools", lambda name, spec: [tool])
    monkeypatch.setattr("orchestrator.evals.run.serving", serving)
    monkeypatch.setattr("orchestrator.evals.run.export_policy", fake_policy_export)
    monkeypatch.setattr("orchestrator.evals.watch.export_policy", fake_policy_export)
    monkeypatch.setattr("orchestrator.evals.watch.Server.serve", serving)


def fake_policy_export(source: Path, step: int, folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")


# -- the cases --------------------------------------------------------------------------------
def held(cwd: Path, kind: str) -> tuple[str, Path, object]:
    root = make_run(cwd / "outputs" / "target", kind)
    return str(root), root, locked(root)


def other_kind(cwd: Path, kind: str) -> tuple[str, Path, object]:
    root = make_run(cwd / "outputs" / "target", OTHER_KIND[kind])
    return str(root), root, nullcontext()


def not_a_run(cwd: Path, kind: str) -> tuple[str, Path, object]:
    root = cwd / "outputs" / "target"
    root.mkdir()
    (root / "thesis.tex").write_text("the user's thesis\n")
    return str(root), root, nullcontext()


def link_out(cwd: Path, kind: str) -> tuple[str, Path, object]:
    """A run of the right kind whose entry the entry point writes is a link out of it."""
    root = make_run(cwd / "outputs" / "target", kind)
    entry = root / ("policy" if kind == "eval" else "logs")
    entry.symlink_to(cwd.parent / "outside", target_is_directory=True)
    return str(root), root, nullcontext()


def dotdot(cwd: Path, kind: str) -> tuple[str, Path, object]:
    """`outputs/target/..`: the folder above the run, where the user keeps other things."""
    make_run(cwd / "outputs" / "target", kind)
    return "outputs/target/..", cwd / "outputs", nullcontext()


CASES = {
    "held": held,
    "other kind": other_kind,
    "not a run": not_a_run,
    "link out": link_out,
    "dotdot": dotdot,
}
REASONS = {
    "held": r"is in use by pid \d+",
    "other kind": r"is an \w+ run( \(made by `[\w ]+`\))?, not an \w+ run",
    "not a run": r"is not empty and is not a run",
    "link out": r"is a symbolic link",
    "dotdot": r"is not empty and is not a run",
}
FIXES = r"(Wait for it to finish|[Pp]ick another --output-dir|Remove the link)"


def refused(call, target: str, context, cwd: Path) -> str:
    """The refusal's message; the tree (links not followed) is exactly what it was."""
    before = snapshot(cwd.parent)
    try:
        with context:
            with pytest.raises(ConfigError) as caught:
                call(target)
    finally:
        release_locks()
    assert snapshot(cwd.parent) == before, "a refusal changed the tree"
    message = str(caught.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("entry", RUN_ENTRIES)
def test_every_entry_point_refuses_and_changes_nothing(tree, entry, case):
    call, kind = RUN_ENTRIES[entry]
    target, folder, context = CASES[case](tree, kind)
    message = refused(call, target, context, tree)
    assert str(folder) in message, message
    assert re.search(REASONS[case], message), message
    assert re.search(FIXES, message), message


@pytest.mark.parametrize("entry", RUN_ENTRIES)
def test_the_control_every_entry_point_starts_in_a_new_folder_and_its_own_run(tree, entry):
    """The same calls pass the guard in a new folder (marked with the entry's kind) and again
    in the run that made, so the refusals above are the guard's."""
    call, kind = RUN_ENTRIES[entry]
    dry = entry == "rl --dry-run"
    for again in (False, True):
        target = tree / "outputs" / "mine"
        try:
            call(str(target))
        except ReachedServing:
            pass
        finally:
            release_locks()
        if dry:
            assert not target.exists()
            return
        marker = json.loads((target / RUN_MARKER).read_text())
        assert marker["kind"] == kind, (again, marker)


# -- the commands that write one thing a user names ----------------------------------------------
def writer_case(cwd: Path, name: str, case: str):
    """(target, folder named, context, reason) of `name` against `case`."""
    root = cwd / "outputs" / "target"
    outside = cwd.parent / "outside"
    if case == "held":
        make_run(root, "rl")
        target = {
            "rl export": root / "exported",
            "rl plot": root,
            "rl tasks": root / "data",
            "rl init": root / "w.yaml",
        }[name]
        return str(target), root, locked(root), r"is in use by pid \d+"
    if case == "not a run":
        root.mkdir()
        (root / "thesis.tex").write_text("the user's thesis\n")
        target = {
            "rl export": root,
            "rl plot": root,
            "rl tasks": root,
            "rl init": root / "thesis.tex",
        }[name]
        reason = {
            "rl export": "already exists",
            "rl plot": "is not a run folder",
            "rl tasks": "is not a dataset written by `rl tasks`",
            "rl init": "exists: pass --force",
        }[name]
        return str(target), target, nullcontext(), reason
    if case == "link out":
        make_run(root, "rl")
        if name == "rl plot":
            (root / "plot.png").symlink_to(outside / "precious.txt")
            return str(root), root / "plot.png", nullcontext(), "is a symbolic link"
        link = cwd / "outputs" / ("link.yaml" if name == "rl init" else "link")
        link.symlink_to(outside / "precious.txt" if name == "rl init" else outside)
        reason = {
            "rl export": "already exists",
            "rl tasks": "is not a dataset written",
            "rl init": "exists: pass --force",
        }[name]
        named = outside / "precious.txt" if name == "rl init" else outside
        return str(link), named, nullcontext(), reason
    assert case == "dotdot"
    make_run(root, "rl")
    reason = {
        "rl export": "already exists",
        "rl plot": "is not a run folder",
        "rl tasks": "is not a dataset written",
        "rl init": "is a folder",
    }[name]
    named = cwd / "outputs" if name != "rl plot" else Path("outputs/target/..")
    return "outputs/target/..", named, nullcontext(), reason


@pytest.mark.parametrize("case", ["held", "not a run", "link out", "dotdot"])
@pytest.mark.parametrize("name", WRITERS)
def test_every_writing_command_refuses_and_changes_nothing(tree, name, case):
    """A run of another kind is no refusal for these: they write into any run's folder, never
    a run's own entries, and only under its lock."""
    target, folder, context, reason = writer_case(tree, name, case)
    message = refused(WRITERS[name], target, context, tree)
    assert str(folder) in message, message
    assert re.search(reason, message), message


@pytest.mark.parametrize("name", WRITERS)
def test_the_control_every_writing_command_writes_into_a_run_nobody_holds(tree, name):
    root = make_run(tree / "outputs" / "target", "sft")
    target = {
        "rl export": root / "exported",
        "rl plot": root,
        "rl tasks": root / "data",
        "rl init": root / "w.yaml",
    }[name]
    WRITERS[name](str(target))
    written = target / "plot.png" if name == "rl plot" else target
    assert written.exists()


def test_rl_hf_refuses_a_dataset_inside_a_held_run(tree, monkeypatch):
    root = make_run(tree / "outputs" / "target", "rl")
    monkeypatch.chdir(root)
    call = command("hf", lambda t: [str(TASKS), "--name", "x", "--no-push"])
    message = refused(call, "", locked(root), tree)
    assert str(root) in message and re.search(r"is in use by pid \d+", message), message
    call("")  # nobody holds it: written
    assert (root / "data" / "datasets" / "x").is_dir()


# -- the reproduced defects -------------------------------------------------------------------
def test_evals_never_deletes_a_policy_folder_it_did_not_make(tree):
    """`evals --run RUN --output-dir RUN2`: RUN2/policy/ holding a user's file stays; evals'
    own export is marked and replaced by the next evaluation."""
    out = make_run(tree / "outputs" / "ev", "eval")
    (out / "policy").mkdir()
    (out / "policy" / "mine.txt").write_text("keep\n")
    message = refused(evals, str(out), nullcontext(), tree)
    assert f"{out}" in message and "policy/ was not made by" in message, message
    (out / "policy" / "mine.txt").unlink()
    (out / "policy").rmdir()
    for _ in range(2):  # the second evaluation replaces the first's export
        with pytest.raises(ReachedServing):
            evals(str(out))
        release_locks()
        assert sorted(p.name for p in (out / "policy").iterdir()) == [
            ".rl-weights",
            "model.safetensors",
        ]


def test_evals_refuses_a_missing_run_before_writing_anything(tree):
    """`evals --run nosuchrun` and `--run outputs/nosuchrun`: one message naming both places
    looked at (never outputs/outputs/...), and no output folder."""
    from orchestrator.evals.config import EvalsConfig
    from orchestrator.evals.run import run

    for name in ("nosuchrun", "outputs/nosuchrun"):
        config = EvalsConfig.model_validate(
            {"output_dir": "outputs/ev", "run": name, "eval": {"env": [{"id": "rl-add-digits"}]}}
        )
        message = refused(lambda _, config=config: run(config), "", nullcontext(), tree)
        assert f"--run: no run {name!r}" in message and "outputs/outputs" not in message
        assert not (tree / "outputs" / "ev").exists()


def test_rl_sft_refuses_to_resume_an_rl_runs_checkpoint(tree):
    """The reported case: `rl sft --output-dir <an RL run> --ckpt.resume-step -1`."""
    root = tree / "outputs" / "source"
    message = refused(rl_sft, str(root), nullcontext(), tree)
    assert "is an rl run (made by `rl`), not an sft run" in message, message


def test_a_run_marked_before_runs_recorded_their_kind_is_known_by_its_files(tree):
    from rlcore.runs.runguard import run_kind

    for config, kind in (
        ("configs/sft.toml", "sft"),
        ("eval.toml", "eval"),
        ("configs/trainer.toml", "rl"),
    ):
        root = tree / "legacy" / kind
        claim(root)
        assert run_kind(root) is None  # nothing written yet: any entry point may take it
        (root / config).parent.mkdir(exist_ok=True)
        (root / config).write_text("")
        assert run_kind(root) == kind
