"""A run folder is data, never trusted (issue #60): `rl stop`, `status`, `delete`, `list`,
`logs` and `plot` on copied, stale, damaged or forged folders. Deletion removes only what the
run made, by exact names; a stale launcher pid lets delete and stop agree; a damaged file is
one line (exit 2 for the commands that act), never a traceback nor a hang. The SLURM cases
with a stand-in scheduler are in tests/integration/test_run_folder_jobs.py."""

import json
import os
import shutil
import textwrap

import pytest

from launcher import slurm
from launcher.commands import run_command
from rlcore import procs
from rlcore.rundir import RunDir


def submitted_run(root, job_id, status: str = "submitted") -> RunDir:
    run = RunDir(root)
    run.claim()
    run.run_json.write_text(json.dumps({"status": status, "slurm_job_id": job_id}))
    return run


# -- SLURM job ids read back ---------------------------------------------------------------------
@pytest.mark.parametrize("job_id", ["--me", "--user=someone", "-u", ["4242"], 4242.5, "1 2"])
def test_rl_stop_never_passes_an_option_or_a_list_as_a_job_id(tmp_path, capsys, job_id):
    """`slurm_job_id: "--me"` in run.json became `scancel --me` (every job of the user)."""
    run = submitted_run(tmp_path / "r", job_id)
    assert run_command("stop", [str(run.root)]) == 2
    err = capsys.readouterr().err
    assert "damaged run folder" in err and "slurm_job_id is not a SLURM job id" in err
    assert "Traceback" not in err  # and no squeue nor scancel ran (the unit tier has none)


def test_scontrol_answers_when_squeue_does_not():
    text = textwrap.dedent("""\
        JobId=9 JobName=run
           JobState=RUNNING Reason=None Dependency=(null)
           Comment=rl-run:abc:/a folder/with spaces
        """)
    job = slurm.scontrol_job("9", text)
    assert job.state == "RUNNING" and job.comment == "rl-run:abc:/a folder/with spaces"


# -- deletion: only what the run made, by exact names --------------------------------------------
def test_rl_delete_unlinks_a_weights_link_to_the_run_itself(tmp_path, capsys):
    """`weights -> .` with a forged .rl-weights naming the run: the whole folder went, the
    user's file in it included."""
    run = RunDir(tmp_path / "r")
    run_id = run.claim()
    (run.root / "mine.txt").write_text("the user's")
    (run.root / "weights").symlink_to(".", target_is_directory=True)
    (run.root / ".rl-weights").write_text(json.dumps({"run_id": run_id,
                                                      "run_folder": str(run.root)}))  # fmt: skip
    (tmp_path / "above").mkdir()
    assert run_command("delete", [str(run.root), "--yes"]) == 0
    assert (run.root / "mine.txt").read_text() == "the user's"
    assert not (run.root / "weights").is_symlink()


def test_rl_delete_unlinks_a_weights_link_to_a_folder_above_or_inside_the_run(tmp_path):
    outer = tmp_path / "outer"
    run = RunDir(outer / "r")
    run_id = run.claim()
    (outer / "keep.txt").write_text("the user's")
    (outer / ".rl-weights").write_text(json.dumps({"run_id": run_id, "run_folder": str(run.root)}))
    (run.root / "weights").symlink_to(outer, target_is_directory=True)
    assert run_command("delete", [str(run.root), "--yes"]) == 0
    assert (outer / "keep.txt").read_text() == "the user's"


def test_a_copied_runs_weights_link_leaves_the_originals_folder(tmp_path):
    """The copy's marker names the same run id; its link leads to the original's policy
    folder, whose marker names the original's folder: only the link goes."""
    from trainer.weights import place_weights

    original = RunDir(tmp_path / "original")
    original.claim()
    place_weights(original, tmp_path / "shm")
    copy = tmp_path / "copy"
    shutil.copytree(original.root, copy, symlinks=True)
    assert run_command("delete", [str(copy), "--yes"]) == 0
    assert [p.name for p in (tmp_path / "shm").iterdir()] != []
    assert original.weights.resolve().is_dir()


@pytest.mark.parametrize("name", [".bashrc.tmp1", ".notes.txt.tmp123", ".run.json.tmp1x",
                                  ".shared-probe-mine", "..rl-run.tmp1"])  # fmt: skip
def test_rl_delete_keeps_a_hidden_file_that_only_looks_temporary(tmp_path, capsys, name):
    run = RunDir(tmp_path / "r")
    run.claim()
    run.logs.mkdir()
    (run.root / name).write_text("the user's")
    own_temporaries = (".run.json.tmp42", ".metrics.jsonl.tmp7", ".shared-probe-55", ".state.tmp3")
    for own in own_temporaries:
        (run.root / own).write_text("rl's")
    assert run_command("delete", [str(run.root), "--yes"]) == 0
    assert sorted(p.name for p in run.root.iterdir()) == [name]
    assert f"kept {name} in" in capsys.readouterr().out


# -- a stale launcher pid: delete and stop agree ----------------------------------------------
def test_a_stale_launcher_pid_naming_a_stranger_lets_delete_go_as_stop_finds_nothing(
    tmp_path, capsys
):
    """The recorded launcher's pid now names another process (this test's own, with another
    start time): `rl stop` says nothing to stop, and `rl delete` refused "is running"."""
    run = RunDir(tmp_path / "r")
    run.claim()
    record = procs.identity() | {"create_time": 1.0}  # the pid reused since
    run.run_json.write_text(json.dumps({"status": "running", "launcher_pid": os.getpid(),
                                        "identities": {"launcher": record}}))  # fmt: skip
    assert run_command("stop", [str(run.root)]) == 0
    assert "nothing to stop" in capsys.readouterr().out
    assert run_command("delete", [str(run.root), "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"pid {os.getpid()} is not this run's launcher" in out and "not running" in out
    assert not run.root.exists()


def test_delete_refuses_a_run_its_proved_launcher_runs(tmp_path, capsys):
    from rlcore.runlock import hold_run
    from tests.unit.launcher.test_path_promises import release_locks

    run = RunDir(tmp_path / "r")
    run.claim()
    run.run_json.write_text(json.dumps({"status": "running", "launcher_pid": os.getpid(),
                                        "identities": {"launcher": procs.identity()}}))  # fmt: skip
    hold_run(run.root)
    try:
        assert run_command("delete", [str(run.root), "--yes"]) == 2
    finally:
        release_locks()
    assert f"is running (launcher pid {os.getpid()})" in capsys.readouterr().err
    assert run.root.exists()
