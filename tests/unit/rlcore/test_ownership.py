"""A folder is a run only if rl marked it; --clean and `rl delete` remove only what a marked
run created, never follow a link, and never touch the current folder, its ancestors, home or a
git work tree. Everything here runs on real folders in a temporary working directory."""

import json
import os
import threading
from pathlib import Path

import pytest

from launcher.commands import run_command
from launcher.preflight import clean_run
from rlcore.errors import ConfigError
from rlcore.processes import procs
from rlcore.runs.ownership import RUN_MARKER, claim, read_run_id, remove_run_files, verified_run
from rlcore.runs.rundir import RunDir
from rlcore.runs.runguard import hold_run
from tests.unit.launcher.test_path_promises import release_locks
from trainer.weights import place_weights


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every file (content) and link (target) under `root`, links not followed."""
    found: dict[str, bytes | str] = {}
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(parent, name)
            if path.is_symlink():
                found[str(path)] = f"-> {os.readlink(path)}"
            elif path.is_file():
                found[str(path)] = path.read_bytes()
    return found


def make_run(root: Path, steps: int = 2) -> RunDir:
    """A run as rl leaves it: marker, configs, logs, metrics, checkpoints, weights, the rollout
    archive and in-run evals."""
    run = RunDir(root)
    run.claim()
    run.configs.mkdir(parents=True, exist_ok=True)
    (run.configs / "trainer.toml").write_text("max_steps = 2\n")
    run.logs.mkdir(exist_ok=True)
    (run.logs / "trainer.log").write_text("log\n")
    for step in range(steps):
        run.append_metrics("trainer", step + 1, {"loss": 0.1})
        (run.checkpoint_dir(step + 1) / "trainer").mkdir(parents=True)
        (run.checkpoint_dir(step + 1) / "MANIFEST").write_text("{}\n")
        run.weight_dir(step).mkdir(parents=True)
        run.samples.mkdir(exist_ok=True)
        (run.samples / f"step_{step}.parquet").write_bytes(b"PAR1")
        (run.evals / f"step_{step}").mkdir(parents=True)
        (run.evals / f"step_{step}" / "summary.json").write_text("{}\n")
    run.run_json.write_text(json.dumps({"status": "finished"}))
    return run


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working folder holding a user file, a sibling run and a folder outside everything."""
    cwd = tmp_path / "project"
    (cwd / "outputs").mkdir(parents=True)
    (cwd / "notes.txt").write_text("the user's own notes\n")
    make_run(cwd / "outputs" / "sibling")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.bin").write_bytes(b"\x00" * 64)
    monkeypatch.chdir(cwd)
    return cwd


def test_a_new_or_empty_folder_becomes_a_run_and_keeps_its_id(tmp_path):
    run_id = claim(tmp_path / "new")
    assert read_run_id(tmp_path / "new") == run_id and claim(tmp_path / "new") == run_id
    (tmp_path / "empty").mkdir()
    assert claim(tmp_path / "empty") != run_id


def test_concurrent_claims_agree_on_one_id(tmp_path):
    ids: list[str] = []
    threads = [threading.Thread(target=lambda: ids.append(claim(tmp_path / "r"))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ids) == 8 and len(set(ids)) == 1


def test_claim_refuses_a_file_a_foreign_folder_and_the_current_folder(workdir):
    with pytest.raises(ConfigError, match=r"'notes.txt' is a file"):
        claim(Path("notes.txt"))
    with pytest.raises(ConfigError, match="it is the current folder"):
        claim(Path("."))
    with pytest.raises(ConfigError, match=r"not empty and is not a run .*found: sibling/"):
        claim(Path("outputs"))
    with pytest.raises(ConfigError, match="holds the current folder"):
        claim(workdir.parent)
    assert not (workdir / RUN_MARKER).exists() and not (workdir / "outputs" / RUN_MARKER).exists()


def test_claim_refuses_the_empty_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="it is the current folder"):
        claim(Path(""))
    assert not (tmp_path / RUN_MARKER).exists()


def test_clean_removes_only_the_runs_entries_and_keeps_foreign_files(workdir, tmp_path):
    run = make_run(workdir / "outputs" / "r")
    (run.root / "mine.txt").write_text("added by the user\n")
    (run.root / "link-out").symlink_to(tmp_path / "outside")
    before = snapshot(tmp_path / "outside") | snapshot(workdir / "outputs" / "sibling")
    clean_run(run.root)
    assert sorted(p.name for p in run.root.iterdir()) == [RUN_MARKER, "link-out", "mine.txt"]
    assert snapshot(tmp_path / "outside") | snapshot(workdir / "outputs" / "sibling") == before
    assert (workdir / "notes.txt").exists()


def test_clean_removes_links_without_following_them(workdir, tmp_path):
    run = make_run(workdir / "outputs" / "r", steps=0)
    (run.root / "checkpoints").mkdir()
    (run.root / "checkpoints" / "step_9").symlink_to(tmp_path / "outside")
    (run.root / "metrics.jsonl").symlink_to(tmp_path / "outside" / "precious.bin")
    before = snapshot(tmp_path / "outside")
    clean_run(run.root)
    assert snapshot(tmp_path / "outside") == before
    assert not (run.root / "checkpoints").exists() and not (run.root / "metrics.jsonl").exists()


def test_clean_refuses_folders_that_are_not_runs(workdir, tmp_path):
    before = snapshot(workdir) | snapshot(tmp_path / "outside")
    for folder in (workdir / "outputs", Path("."), workdir, tmp_path / "outside"):
        with pytest.raises(ConfigError, match="never deleted from|is not a run"):
            clean_run(folder)
    git = tmp_path / "repo"
    make_run(git)
    (git / ".git").mkdir()
    with pytest.raises(ConfigError, match="git work tree"):
        clean_run(git)
    assert snapshot(workdir) | snapshot(tmp_path / "outside") == before


def test_the_runs_own_weights_folder_goes_by_its_marker(workdir, tmp_path):
    shm = tmp_path / "shm"
    run = make_run(workdir / "outputs" / "r", steps=0)
    place_weights(run, shm)
    (run.weights / "step_1").mkdir()
    other = shm / "rl-weights-someone-else"
    other.mkdir(parents=True)
    (other / "x").write_text("not ours\n")
    clean_run(run.root)
    assert not run.weights.exists() and sorted(p.name for p in shm.iterdir()) == [other.name]
    assert (other / "x").exists()


def test_a_weights_link_to_a_folder_without_the_runs_marker_is_only_unlinked(workdir, tmp_path):
    run = make_run(workdir / "outputs" / "r", steps=0)
    run.weights.symlink_to(tmp_path / "outside", target_is_directory=True)
    before = snapshot(tmp_path / "outside")
    remove_run_files(run.root, keep_marker=True)
    assert not run.weights.is_symlink() and snapshot(tmp_path / "outside") == before


def test_a_run_nested_in_an_entry_is_kept(workdir):
    run = make_run(workdir / "outputs" / "r", steps=0)
    inner = make_run(run.root / "logs" / "inner", steps=1)
    removal = remove_run_files(run.root, keep_marker=True)
    assert removal.nested == {"logs": [inner.root]} and "logs" not in removal.kept
    assert read_run_id(inner.root) is not None


def test_verified_run_says_what_it_found(workdir):
    (workdir / "outputs" / "plain").mkdir()
    (workdir / "outputs" / "plain" / "data.csv").write_text("1,2\n")
    with pytest.raises(ConfigError, match=r"no \.rl-run marker .*found: data.csv"):
        verified_run(workdir / "outputs" / "plain", "RUN")
    (workdir / "outputs" / "link").symlink_to(workdir / "outputs" / "sibling")
    with pytest.raises(ConfigError, match="symbolic link"):
        verified_run(workdir / "outputs" / "link", "RUN")


def test_rl_delete_resolves_names_under_outputs_and_paths_only_if_runs(workdir, tmp_path, capsys):
    make_run(workdir / "sibling")  # ./sibling exists too: the name still means outputs/sibling
    everything = snapshot(tmp_path)
    for target in ("..", "docs", "notes.txt", str(tmp_path / "outside"), ".", "outputs", "/"):
        assert run_command("delete", [target, "--yes"]) == 2, target
    assert snapshot(tmp_path) == everything
    assert run_command("delete", ["sibling", "--yes"]) == 0
    assert not (workdir / "outputs" / "sibling").exists() and (workdir / "sibling").exists()
    assert f"deleted {workdir / 'outputs' / 'sibling'} " in capsys.readouterr().out


def test_rl_delete_keeps_what_rl_did_not_create(workdir, capsys):
    run = make_run(workdir / "outputs" / "r")
    (run.root / "keep-me.md").write_text("notes\n")
    assert run_command("delete", ["r", "--yes"]) == 0
    assert sorted(p.name for p in run.root.iterdir()) == ["keep-me.md"]
    assert "kept keep-me.md" in capsys.readouterr().out


def test_rl_delete_asks_and_refuses_a_running_run(workdir, capsys, monkeypatch):
    run = make_run(workdir / "outputs" / "r")
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert run_command("delete", ["r"]) == 2 and "needs --yes" in capsys.readouterr().err
    run.run_json.write_text(
        json.dumps(
            {
                "status": "running",
                "launcher_pid": os.getpid(),
                "identities": {"launcher": procs.identity()},
            }
        )
    )
    hold_run(run.root)  # this process is the run's launcher, proved
    try:
        assert run_command("delete", ["r", "--yes"]) == 2
    finally:
        release_locks()
    assert "is running" in capsys.readouterr().err and run.root.exists()
