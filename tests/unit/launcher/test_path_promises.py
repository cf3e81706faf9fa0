"""Paths are checked after they are resolved, and a run has one owner at a time.

Every command that writes into or deletes from a run is run in-process against generated path
forms (`x/..`, `./`, `~`, trailing slashes, links to the current folder, home and their parents,
missing parents, `''`) in a fresh folder tree each time: nothing outside a marked run (or the
path the user named) is ever written or removed, and a refusal changes nothing at all. A
run held by another live process, and runs on SLURM (squeue/scancel), are checked with real
processes in tests/integration/test_path_holders.py."""

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from launcher.commands import run_command
from launcher.preflight import check_output_dir, prepare_run_dir
from launcher.prepare import build_plan
from launcher.rl_config import RLConfig
from launcher.workflow import load_workflow
from rlcore.config.base import RUNS_ROOT
from rlcore.errors import ConfigError
from rlcore.files.paths import resolve_path
from rlcore.runs import runguard
from rlcore.runs.ownership import RUN_MARKER, read_run_id
from rlcore.runs.rundir import RunDir

REPO = Path(__file__).resolve().parents[3]
PARTS = (
    "..",
    ".",
    "nothere",
    "outputs",
    "sibling",
    "empty",
    "new",
    "notes.txt",
    "link-cwd",
    "link-home",
    "link-up",
    "link-run",
    "dangling",
)
PREFIXES = ("", "./", "~/", "~", "{base}/", "{cwd}/", "outputs/", "nothere/../")
FORMS = st.builds(
    lambda prefix, parts, slash: prefix + "/".join(parts) + ("/" if slash and parts else ""),
    st.sampled_from(PREFIXES),
    st.lists(st.sampled_from(PARTS), max_size=4),
    st.booleans(),
)
LINK_THEN_DOTDOT = (
    "link-home/..",
    "link-cwd/../project",
    "outputs/link-run/..",
    "dangling/new/..",
    "~/project/link-up/home/..",
)
"""Forms where following a link before `..` leads elsewhere than cancelling them as text."""


def link_examples(test):
    for form in LINK_THEN_DOTDOT:
        test = example(form=form)(test)
    return test


PROPERTY = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# -- the tree ---------------------------------------------------------------------------------
def make_tree(monkeypatch, parent: Path) -> Path:
    """base/ (outside), base/home/ (HOME), base/home/project/ (the current folder: the user's
    notes, a finished run outputs/sibling, an empty folder, links to the current folder, home,
    base, the run and nowhere); returns the current folder."""
    base = Path(tempfile.mkdtemp(dir=parent)).resolve()
    (base / "precious.bin").write_bytes(b"\x00" * 16)
    home = base / "home"
    cwd = home / "project"
    (cwd / "outputs" / "empty").mkdir(parents=True)
    (home / ".profile").write_text("the user's profile\n")
    (cwd / "notes.txt").write_text("the user's own notes\n")
    run = RunDir(cwd / "outputs" / "sibling")
    run.claim()
    run.configs.mkdir()
    run.config_file("trainer").write_text("")
    run.append_metrics("trainer", 1, {"loss": 0.1})
    (run.checkpoint_dir(1) / "trainer").mkdir(parents=True)
    (run.checkpoint_dir(1) / "MANIFEST").write_text("{}\n")
    run.weight_dir(1).mkdir(parents=True)
    (run.weight_dir(1) / "STABLE").write_text("1\n")
    run.run_json.write_text(json.dumps({"status": "finished"}))
    for name, target in (
        ("link-cwd", cwd),
        ("link-home", home),
        ("link-up", base),
        ("dangling", base / "gone"),
    ):
        (cwd / name).symlink_to(target)
    (cwd / "outputs" / "link-run").symlink_to(run.root)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    return cwd


def snapshot(root: Path) -> dict[str, str | bytes]:
    """Every folder, file (content) and link (target) under `root`, links not followed."""
    found: dict[str, str | bytes] = {}
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(parent, name)
            if path.is_symlink():
                found[str(path)] = f"-> {os.readlink(path)}"
            elif path.is_dir():
                found[str(path)] = "dir"
            else:
                found[str(path)] = path.read_bytes()
    return found


def spelled(form: str, cwd: Path) -> str:
    return form.format(base=cwd.parents[1], cwd=cwd)


def release_locks() -> None:
    """In-process starts keep their run lock for the life of the process: let go between
    examples, as a finished `rl` would."""
    for fd in runguard._held.values():
        os.close(fd)
    runguard._held.clear()


def changes(before: dict, after: dict) -> set[Path]:
    return {Path(p) for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_promise(cwd: Path, before: dict, allowed: list[Path], refused: bool) -> None:
    """Nothing changed outside `allowed` (each a marked run, or the path the user named, and
    the missing folders above it); a refusal changed nothing; the current folder, home and
    the folder above are never runs and the user's files are intact."""
    base = cwd.parents[1]
    after = snapshot(base)
    changed = changes(before, after)
    if refused:
        assert not changed, changed
    for path in changed:
        assert any(inside(path, a) for a in allowed) or (
            str(path) not in before and any(inside(a, path) for a in allowed)
        ), (path, allowed)
    for folder in (cwd, cwd.parent, base):
        assert not (folder / RUN_MARKER).exists(), folder
    for user_file in (cwd / "notes.txt", base / "precious.bin", base / "home" / ".profile"):
        assert after[str(user_file)] == before[str(user_file)]


def target_of(form: str, cwd: Path) -> Path | None:
    """Where `form` leads in make_tree's tree, worked out by hand from what the tree holds
    (never by the code under test): `~` is home (`~name` names no user here: None), a relative
    form starts at the current folder, each link is replaced by its target as it is met, `..`
    then goes to the folder above (after a missing folder or a file too, as the kernel's
    resolution of the created path will), `.` and empty parts stay. None: empty."""
    home, base = cwd.parent, cwd.parents[1]
    out = cwd / "outputs"
    links = {
        cwd / "link-cwd": cwd,
        cwd / "link-home": home,
        cwd / "link-up": base,
        cwd / "dangling": base / "gone",
        out / "link-run": out / "sibling",
    }
    if not form.strip():
        return None
    if form.startswith("~"):
        user, _, rest = form.partition("/")
        if user != "~":
            return None
        path, parts = home, rest
    elif form.startswith("/"):
        path, parts = Path("/"), form
    else:
        path, parts = cwd, form
    for part in parts.split("/"):
        if part == "..":
            path = path.parent
        elif part not in ("", "."):
            path = links.get(path / part, path / part)
    return path


# -- rl start, --clean, --dry-run -------------------------------------------------------------
@pytest.mark.parametrize("how", ["start", "clean", "dry-run"])
@PROPERTY
@given(form=FORMS)
def test_rl_writes_only_into_a_marked_run_whatever_the_output_dir(tmp_path, monkeypatch, how, form):
    cwd = make_tree(monkeypatch, tmp_path)
    form = spelled(form, cwd)
    before = snapshot(cwd.parents[1])
    target = target_of(form, cwd)
    try:
        plan = build_plan(RLConfig.model_validate({"output_dir": form}), dry_run=True)
        assert plan.run.root == target and plan.run.root.is_absolute()
        if how == "dry-run":
            check_output_dir(plan, clean=True)
        else:
            prepare_run_dir(plan, clean=how == "clean")
        refused = False
    except (ConfigError, ValidationError) as err:
        assert "\n" not in str(err).strip() or isinstance(err, ValidationError)
        refused = True
    finally:
        release_locks()
    if target is None:  # empty, or `~..`: a user of that name has no home
        assert refused
    allowed = [target] if target is not None and read_run_id(target) is not None else []
    check_promise(cwd, before, [] if how == "dry-run" else allowed, refused or how == "dry-run")


# -- rl delete --------------------------------------------------------------------------------
@PROPERTY
@given(form=FORMS)
def test_rl_delete_removes_only_a_marked_run_whatever_the_path(tmp_path, monkeypatch, capsys, form):
    cwd = make_tree(monkeypatch, tmp_path)
    form = spelled(form, cwd)
    before = snapshot(cwd.parents[1])
    marked = {p for p in map(Path, before) if p.name == RUN_MARKER}
    code = run_command("delete", [form, "--yes"])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert err.count("\n") == 1, err
    allowed = [m.parent for m in marked]
    check_promise(cwd, before, allowed, refused=code == 2)
    if form == "":
        assert code == 2 and "RUN '' is empty" in err


# -- rl export --out, rl plot --out -----------------------------------------------------------
@PROPERTY
@given(form=FORMS)
def test_rl_export_writes_only_the_folder_it_was_given(tmp_path, monkeypatch, capsys, form):
    def fake_export(run, step, kind, out, dtype):  # the trainer's export, without its process
        out.mkdir(parents=True, exist_ok=True)
        (out / "model.safetensors").write_bytes(b"weights")
        return "bfloat16"

    monkeypatch.setattr("launcher.commands.export.run_export", fake_export)
    cwd = make_tree(monkeypatch, tmp_path)
    form = spelled(form, cwd)
    before = snapshot(cwd.parents[1])
    code = run_command("export", ["sibling", "--out", form])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err
    target = target_of(form, cwd)
    if code == 0:  # a new or empty folder, never the current one, home or above
        assert target is not None and not any(
            inside(folder, target) for folder in (cwd, cwd.parent)
        )
    check_promise(cwd, before, [target] if code == 0 else [], refused=code == 2)


@PROPERTY
@given(form=FORMS)
@link_examples
def test_path_flags_resolve_and_refuse_empty_and_folders(tmp_path, monkeypatch, form):
    from rlcore.files.paths import path_arg

    cwd = make_tree(monkeypatch, tmp_path)
    form = spelled(form, cwd)
    target = target_of(form, cwd)
    if target is None:
        with pytest.raises(ConfigError, match=r"^-o '[^']*' is (empty|not a usable path)"):
            path_arg("-o", file=True)(form)
        return
    if target.is_dir():
        with pytest.raises(ConfigError, match="is a folder"):
            path_arg("-o", file=True)(form)
    else:
        assert path_arg("-o", file=True)(form) == target
    assert not str(target).endswith("/") or target == Path("/")


# -- weight_transfer.dir ----------------------------------------------------------------------
@PROPERTY
@given(form=FORMS)
@link_examples
def test_weight_transfer_dir_writes_only_the_runs_own_folder(tmp_path, monkeypatch, form):
    from trainer.weights import place_weights

    cwd = make_tree(monkeypatch, tmp_path)
    form = spelled(form, cwd)
    before = snapshot(cwd.parents[1])
    try:
        config = RLConfig.model_validate(
            {"output_dir": "outputs/wt", "weight_transfer": {"dir": form}}
        )
    except ValidationError:
        assert target_of(form, cwd) is None
        return
    folder = config.trainer.weight_transfer.dir
    assert folder == target_of(form, cwd)
    run = RunDir(config.trainer.output_dir)
    try:
        place_weights(run, folder)
        refused = False
    except ConfigError:
        refused = True
    own = folder / f"rl-weights-{read_run_id(run.root)}"
    check_promise(cwd, before, [run.root, own], refused=False)
    if not refused:
        assert run.weights.resolve() == own and (own / ".rl-weights").is_file()


# -- a workflow's job name --------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(name=st.text(alphabet="a_.-/~ ", max_size=6))
def test_a_job_name_is_a_folder_directly_under_outputs_or_refused(tmp_path_factory, name):
    path = tmp_path_factory.mktemp("wf") / "w.yaml"
    path.write_text(f"job: {{name: {json.dumps(name)}}}\n")
    try:
        workflow = load_workflow(path)
    except ConfigError as err:
        assert "job.name" in str(err)
        return
    folder = resolve_path(f"outputs/{workflow.job.name}")
    assert folder.parent == resolve_path(RUNS_ROOT)


# -- the reproduced bugs ----------------------------------------------------------------------
def test_an_output_dir_of_a_missing_folder_and_dotdot_is_the_current_folder(tmp_path, monkeypatch):
    cwd = make_tree(monkeypatch, tmp_path)
    before = snapshot(cwd.parents[1])
    plan = build_plan(RLConfig.model_validate({"output_dir": "nothere/.."}), dry_run=True)
    for check in (lambda: check_output_dir(plan, False), lambda: prepare_run_dir(plan, False)):
        with pytest.raises(ConfigError, match="it is the current folder"):
            check()
    assert snapshot(cwd.parents[1]) == before  # no marker here, no nothere/ created
    assert run_command("delete", ["nothere/..", "--yes"]) == 2
    assert snapshot(cwd.parents[1]) == before


@pytest.mark.parametrize("name", ["..", "."])
def test_a_workflow_job_named_dotdot_is_refused(tmp_path, name):
    path = tmp_path / "w.yaml"
    path.write_text(f"job: {{name: '{name}'}}\n")
    with pytest.raises(ConfigError, match=r"job.name.*is not a run folder name"):
        load_workflow(path)
