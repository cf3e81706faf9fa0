"""Run management in-process on real run directories: list, status, delete, plot, run, API keys,
every subcommand's --help, and a corrupt run.json."""

import json
import os

import pytest

from launcher.commands import run_command
from launcher.rl import API_KEY_FLAG, main, take_flag
from rlcore.processes import procs
from rlcore.runs.rundir import RunDir
from rlcore.runs.runguard import hold_run
from tests.unit.launcher.test_path_promises import release_locks


def make_run(root, steps=3, status="finished", launcher_pid=None):
    run = RunDir(root)
    run.claim()
    run.configs.mkdir(parents=True)
    for step in range(steps):
        run.append_metrics("orchestrator", step, {"reward": step / steps, "num_tokens": 10})
        run.append_metrics("trainer", step + 1, {"loss": 0.1, "entropy": 1.0, "mismatch_kl": 0.0})
    state = {"status": status, "launcher_pid": launcher_pid}
    run.run_json.write_text(json.dumps(state))
    return run


def test_list_shows_runs_below_a_folder(tmp_path, capsys):
    make_run(tmp_path / "a")
    make_run(tmp_path / "group" / "b", steps=2, status="failed")
    assert run_command("list", [str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["RUN", "STATUS", "STEP", "CHECKPOINT", "DISK", "GiB"][:5]
    assert lines[1].split()[:4] == [str(tmp_path / "a"), "finished", "3", "-"]
    assert lines[2].split()[:3] == [str(tmp_path / "group" / "b"), "failed", "2"]


def test_delete_asks_refuses_running_and_deletes_with_yes(tmp_path, capsys, monkeypatch):
    run = make_run(tmp_path / "r")
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert run_command("delete", [str(run.root)]) == 2
    assert "needs --yes" in capsys.readouterr().err and run.root.exists()
    live = make_run(tmp_path / "live", status="running", launcher_pid=os.getpid())
    state = json.loads(live.run_json.read_text())
    live.run_json.write_text(json.dumps(state | {"identities": {"launcher": procs.identity()}}))
    hold_run(live.root)  # this process is the live run's launcher, proved
    try:
        assert run_command("delete", [str(live.root), "--yes"]) == 2
    finally:
        release_locks()
    assert "is running" in capsys.readouterr().err and live.root.exists()
    assert run_command("delete", [str(run.root), "--yes"]) == 0 and not run.root.exists()


def test_delete_says_why_it_keeps_a_run_nested_in_the_run(tmp_path, capsys):
    """It said it kept `checkpoints` "not created by rl" (rl had made it) and dropped the
    marker, so deleting the run again after the nested one was refused as "not a run"."""
    run = make_run(tmp_path / "r")
    inner = make_run(run.root / "checkpoints" / "inner")
    (run.root / "notes.txt").write_text("mine")
    assert run_command("delete", [str(run.root), "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"kept {run.root / 'checkpoints'}: rl made it for this run, but it now holds " in out
    assert f"another run ({inner.root}, with its own .rl-run)" in out
    assert f"`rl delete {inner.root}` (or move it out), then `rl delete {run.root}`" in out
    assert "kept notes.txt in" in out and "checkpoints, notes.txt" not in out
    assert f"rl: deleted {run.root} " not in out and "configs" in out  # what it did remove
    assert sorted(p.name for p in run.root.iterdir()) == [".rl-run", "checkpoints", "notes.txt"]
    assert run_command("delete", [str(inner.root), "--yes"]) == 0
    assert run_command("delete", [str(run.root), "--yes"]) == 0
    assert sorted(p.name for p in run.root.iterdir()) == ["notes.txt"]


def test_run_names_resolve_under_outputs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = make_run(tmp_path / "outputs" / "mine")
    run.samples.mkdir()
    (run.samples / "step_0.parquet").write_bytes(bytes(3 * 2**20))  # the archive counts
    assert run_command("status", ["mine"]) == 0
    out = capsys.readouterr().out
    assert "outputs/mine" in out and "rollout archive samples/: 3.0 MiB" in out
    assert run_command("status", ["nope"]) == 2
    assert "rl list" in capsys.readouterr().err


def test_every_subcommand_has_its_own_help_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from launcher.commands import COMMANDS

    monkeypatch.chdir(tmp_path)
    for name in COMMANDS:
        for flag in ("-h", "--help"):
            with pytest.raises(SystemExit) as done:
                run_command(name, [flag])
            out = capsys.readouterr().out
            assert done.value.code == 0 and out.startswith(f"usage: rl {name}"), (name, out)
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_run_json_reads_as_unreadable(tmp_path, capsys, monkeypatch):
    run = make_run(tmp_path / "r")
    run.run_json.write_text('{"status": "runn')
    assert run_command("status", [str(run.root)]) == 0
    out = capsys.readouterr().out
    assert "unreadable" in out and "Traceback" not in out
    assert run_command("list", [str(tmp_path)]) == 0
    assert "unreadable" in capsys.readouterr().out
    assert run_command("logs", [str(run.root)]) == 2  # no log files, said in one line
    assert "no logs in" in capsys.readouterr().err
    assert run_command("stop", [str(run.root)]) == 2
    assert "damaged run folder" in capsys.readouterr().err
    assert run_command("delete", [str(run.root), "--yes"]) == 0
    assert "cannot tell whether it still runs" in capsys.readouterr().err


def test_plot_writes_a_png_of_the_curves(tmp_path, capsys):
    run = make_run(tmp_path / "r")
    assert run_command("plot", [str(run.root)]) == 0
    png = run.root / "plot.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert run_command("plot", [str(tmp_path / "r"), "--out", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").exists()
    empty = RunDir(tmp_path / "empty")
    empty.claim()
    assert run_command("plot", [str(empty.root)]) == 2


@pytest.mark.parametrize(
    ("out", "words"),
    [
        ("notes.txt", "notes.txt: `rl plot` writes an image; give a name ending in .png"),
        ("curves", "curves: `rl plot` writes an image; give a name ending in .png"),
        ("missing/c.png", "folder {tmp}/missing does not exist: create it first"),
        ("a-file/c.png", "a-file is a file, not a folder"),
        ("read-only/c.png", "read-only is not writable"),
    ],
)
def test_plot_refuses_an_out_it_cannot_write_and_writes_nothing(
    tmp_path, capsys, monkeypatch, as_a_user, out, words
):
    run = make_run(tmp_path / "r")
    (tmp_path / "a-file").write_text("")
    (tmp_path / "read-only").mkdir(mode=0o555)
    monkeypatch.chdir(tmp_path)
    words = words.format(tmp=tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert run_command("plot", [str(run.root), "--out", out]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err
    assert sorted(tmp_path.rglob("*")) == before


def test_wandb_api_key_goes_to_the_environment_only(monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    argv, key = take_flag(
        ["@", "x.toml", API_KEY_FLAG, "sekrit123", "--max-steps", "2"], API_KEY_FLAG
    )
    assert argv == ["@", "x.toml", "--max-steps", "2"] and key == "sekrit123"
    with pytest.raises(SystemExit):
        main(["--wandb-api-key=sekrit456", "--print-config"])
    out = capsys.readouterr()
    assert "sekrit456" not in out.out + out.err and os.environ["WANDB_API_KEY"] == "sekrit456"


def test_run_is_a_synonym(capsys):
    with pytest.raises(SystemExit) as done:
        main(["run", "--max-steps", "3", "--print-config"])
    assert done.value.code == 0 and "max_steps = 3" in capsys.readouterr().out


def test_exit_messages_name_the_real_code_and_oom_kills():
    from launcher.exits import exit_message

    assert "most likely" in exit_message("trainer", -9) and "micro-batch-tokens" in exit_message(
        "trainer", 137
    )
    oom = exit_message("trainer", -9, (2, 3))
    assert "by the kernel for running out of memory" in oom and "from 2 to 3" in oom
    assert "micro-batch-tokens" in oom and "most likely" not in oom
    other = exit_message("inference", 137, (4, 4))
    assert "by another process or a user, not for memory" in other and "stayed at 4" in other
    assert "micro-batch-tokens" not in other
    assert exit_message("inference", 0) == (
        "inference stopped unexpectedly with code 0 while the run was going on"
    )
    assert exit_message("trainer", 1) == "trainer exited with code 1"
    assert exit_message("orchestrator", -15) == "orchestrator was killed by SIGTERM"


def test_the_wait_is_read_off_the_main_threads_stack():
    from launcher.stall import innermost_project_frame

    dump = (
        "Thread 0x00007f (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n\n'
        "Current thread 0x00007e (most recent call first):\n"
        '  File "/usr/lib/python3.11/time.py", line 1 in sleep\n'
        '  File "/work/repo/.venv/lib/python3.11/site-packages/x/y.py", line 9 in f\n'
        '  File "/work/repo/trainer/data.py", line 31 in wait_for_batch\n'
        '  File "/work/repo/trainer/train.py", line 140 in next_batch\n'
    )
    assert innermost_project_frame(dump) == "trainer/data.py:31 in wait_for_batch"
    through_poll = dump.replace(  # the wait goes through rlcore.processes.poll: its caller is named
        '  File "/work/repo/trainer/data.py"',
        '  File "/work/repo/rlcore/processes/poll.py", line 91 in sleep\n'
        '  File "/work/repo/rlcore/processes/poll.py", line 110 in wait_until\n'
        '  File "/work/repo/trainer/data.py"',
    )
    assert innermost_project_frame(through_poll) == "trainer/data.py:31 in wait_for_batch"
    assert innermost_project_frame("nothing here") is None


def test_plot_takes_the_watched_eval_rewards_per_environment():
    from launcher.plot import watched_rewards

    records = [
        {"component": "orchestrator", "step": 1, "reward": 0.1},
        {"component": "evals", "step": 2, "a/reward": 0.5, "a/pass@1": 0.5, "b#1/reward": 0.2},
        {"component": "evals", "step": 4, "a/reward": 0.7, "b#1/reward": 0.3},
        {"component": "evals", "step": 4, "a/reward": 0.8, "b#1/reward": 0.4},  # resumed: wins
    ]
    assert watched_rewards(records) == {
        "eval a": ([2, 4], [0.5, 0.8]),
        "eval b#1": ([2, 4], [0.2, 0.4]),
    }


def test_the_oom_kill_count_is_read_from_the_cgroup(tmp_path, monkeypatch):
    from launcher import exits as launch

    v2, v1 = tmp_path / "memory.events", tmp_path / "memory.oom_control"
    monkeypatch.setattr(launch, "OOM_COUNTERS", ((str(v2), "oom_kill"), (str(v1), "oom_kill")))
    assert launch.oom_kills() is None  # neither file: the message keeps "most likely"
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n")
    assert launch.oom_kills() == 7
    v2.write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n")
    assert launch.oom_kills() == 2
