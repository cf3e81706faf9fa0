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
from rlcore.processes import procs
from rlcore.runs.rundir import RunDir


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
    (run.root / ".rl-weights").write_text(
        json.dumps({"run_id": run_id, "run_folder": str(run.root)})
    )
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


@pytest.mark.parametrize(
    "name",
    [".bashrc.tmp1", ".notes.txt.tmp123", ".run.json.tmp1x", ".shared-probe-mine", "..rl-run.tmp1"],
)
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
    run.run_json.write_text(
        json.dumps(
            {"status": "running", "launcher_pid": os.getpid(), "identities": {"launcher": record}}
        )
    )
    assert run_command("stop", [str(run.root)]) == 0
    assert "nothing to stop" in capsys.readouterr().out
    assert run_command("delete", [str(run.root), "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"pid {os.getpid()} is not this run's launcher" in out and "not running" in out
    assert not run.root.exists()


def test_delete_refuses_a_run_its_proved_launcher_runs(tmp_path, capsys):
    from rlcore.runs.runguard import hold_run
    from tests.unit.launcher.test_path_promises import release_locks

    run = RunDir(tmp_path / "r")
    run.claim()
    run.run_json.write_text(
        json.dumps(
            {
                "status": "running",
                "launcher_pid": os.getpid(),
                "identities": {"launcher": procs.identity()},
            }
        )
    )
    hold_run(run.root)
    try:
        assert run_command("delete", [str(run.root), "--yes"]) == 2
    finally:
        release_locks()
    assert f"is running (launcher pid {os.getpid()})" in capsys.readouterr().err
    assert run.root.exists()


# -- an empty RUN ---------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["stop", "status", "logs", "delete", "plot", "export"])
def test_an_empty_run_is_refused_never_taken_for_the_latest(tmp_path, monkeypatch, capsys, command):
    """`rl stop "$RUN"` with RUN unset acted on the latest run under outputs/."""
    monkeypatch.chdir(tmp_path)
    run = RunDir(tmp_path / "outputs" / "latest")
    run.claim()
    run.logs.mkdir()
    run.log_file("trainer").write_text("a line\n")
    run.run_json.write_text(json.dumps({"status": "finished"}))
    extra = ["--out", str(tmp_path / "exported")] if command == "export" else []
    assert run_command(command, ["", *extra]) == 2
    err = capsys.readouterr().err
    assert "RUN '' is empty" in err and "latest" not in err and run.root.exists()


# -- damaged files: one line, never a hang nor a traceback ---------------------------------------
def damaged_run(root, target: str, kind: str) -> RunDir:
    run = RunDir(root)
    run.claim()
    run.logs.mkdir()
    run.log_file("trainer").write_text("trainer: step 1\n")
    run.append_metrics("trainer", 1, {"loss": 0.5})
    run.run_json.write_text(json.dumps({"status": "finished"}))
    (run.root / "state").mkdir()
    (run.root / "state" / "trainer.json").write_text(json.dumps({"pid": os.getpid(), "waits": []}))
    path = run.root / target
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "sparse-no-newline":
        with path.open("wb") as f:
            f.truncate(2**30)
    elif kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    return run


TARGETS = (".rl-run", "run.json", "metrics.jsonl", "state/trainer.json", "logs/trainer.log")
KINDS = ("fifo", "dev-zero", "sparse-no-newline", "deep")
PLOT_READS = (".rl-run", "run.json", "metrics.jsonl")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("target", TARGETS)
def test_every_command_reads_a_damaged_file_as_data(tmp_path, capsys, target, kind):
    """run.json as a FIFO hung `rl status`, `stop`, `delete`, `list` and `plot`; linked to
    /dev/zero it was read until memory ran out; 100,000 levels deep it was a RecursionError
    traceback in `rl list`; a 1 GiB metrics.jsonl without a newline was read whole."""
    run = damaged_run(tmp_path / "runs" / "bad", target, kind)
    healthy = damaged_run(tmp_path / "runs" / "good", "logs/trainer.log", "none")
    for command, args in (
        ("status", [str(run.root)]),
        ("list", [str(tmp_path / "runs")]),
        ("logs", [str(run.root)]),
        ("stop", [str(run.root)]),
        ("plot", [str(run.root), "--out", str(tmp_path / "p.png")]),
        ("delete", [str(run.root), "--yes"]),
    ):
        if command == "plot" and target not in PLOT_READS:
            continue  # matplotlib takes a second; plot reads nothing else
        code = run_command(command, args)
        out, err = capsys.readouterr()
        assert code in (0, 1, 2), (command, code)
        assert "Traceback" not in out + err and len(out + err) < 200_000, (command, err[-500:])
        if "error: damaged run folder" in err:
            assert code == 2 and len(err.splitlines()) == 1, (command, err)
        if command == "list":
            assert str(healthy.root) in out, out


def test_a_damaged_run_json_is_one_line_and_unreadable_in_the_listing(tmp_path, capsys):
    run = damaged_run(tmp_path / "runs" / "bad", "run.json", "fifo")
    damaged_run(tmp_path / "runs" / "good", "logs/trainer.log", "none")
    assert run_command("stop", [str(run.root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rl stop: error: damaged run folder: ") and "FIFO" in err
    assert run_command("list", [str(tmp_path / "runs")]) == 0
    rows = [line.split()[:2] for line in capsys.readouterr().out.splitlines()]
    assert [str(run.root), "unreadable"] in rows and [
        str(tmp_path / "runs" / "good"),
        "finished",
    ] in rows


def test_status_reads_only_the_tail_of_a_huge_metrics_file(tmp_path, capsys):
    """The last steps come from the last few MiB; a 1 GiB file without a line break is
    never read whole (nor by `rl plot`, which reads at most its bound)."""
    from rlcore.files.readback import METRICS_TAIL
    from rlcore.reporting.metrics import read_last_records, read_records

    run = damaged_run(tmp_path / "r", "metrics.jsonl", "sparse-no-newline")
    with run.metrics.open("ab") as f:
        f.write(b'\n{"component": "trainer", "step": 7, "time": 1}\n')
    assert run_command("status", [str(run.root)]) == 0
    assert "last logged step 7" in capsys.readouterr().out
    assert [r["step"] for r in read_last_records(run.metrics, run.root)] == [7]
    records, offset = read_records(run.metrics, 0, run.root)
    assert records == [] and offset == METRICS_TAIL.max_bytes  # one over-long line: skipped


def test_metrics_records_of_the_wrong_shape_are_skipped(tmp_path):
    from rlcore.reporting.metrics import read_records, record_step_line

    path = tmp_path / "metrics.jsonl"
    lines = [
        '{"component": "trainer", "step": [1]}',
        '{"component": 3, "step": 1}',
        "[1]",
        '{"component": "orchestrator", "step": 2, "reward": "high"}',
        '{"component": "orchestrator", "step": 3, "reward": 0.5, "num_tokens": "x"}',
        "[" * 5000 + "]" * 5000,
    ]
    path.write_text("\n".join(lines) + "\n")
    records, _ = read_records(path)
    assert [r["step"] for r in records] == [2, 3]
    assert "Step 3" in record_step_line(records[1])


def test_logs_prints_the_tail_of_a_huge_log_and_says_so(tmp_path, capsys):
    run = damaged_run(tmp_path / "r", "logs/trainer.log", "sparse-no-newline")
    with run.log_file("trainer").open("ab") as f:
        f.write(b"\nthe last line\n")
    assert run_command("logs", [str(run.root), "trainer"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("the last line") and len(out) < 100_000
    assert "bytes before these lines (the whole log: " in out


# -- long names and huge values in messages ------------------------------------------------------
def test_a_name_longer_than_linux_allows_is_one_line(tmp_path, capsys):
    """A 300-character --output-dir was an OSError traceback (ENAMETOOLONG)."""
    from rlcore.config.entry import parse_config as parse
    from rlcore.errors import ConfigError

    long = str(tmp_path / ("a" * 300))
    with pytest.raises((ConfigError, SystemExit)):
        parse(RLConfigForTest(), "rl", ["--output-dir", long])
    err = capsys.readouterr().err
    assert "name of 300 bytes" in err and "Traceback" not in err
    assert run_command("status", ["b" * 300]) == 2
    assert "name of 300 bytes" in capsys.readouterr().err


def RLConfigForTest():
    from launcher.rl_config import RLConfig

    return RLConfig


def test_a_megabyte_key_name_is_cut_in_the_message(tmp_path, capsys):
    """A 1 MiB key name in a TOML file was a 2 MB error line."""
    from launcher.rl import main

    config = tmp_path / "big.toml"
    config.write_text("k" * 2**20 + " = 1\n")
    with pytest.raises(SystemExit) as done:
        main(["@", str(config), "--dry-run"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "unknown key" in err and len(err) < 10_000


# -- secrets in a library's error -----------------------------------------------------------------
def test_a_dataset_urls_password_never_shows_in_the_libraries_error(tmp_path, monkeypatch):
    """datasets quoted `https://u:pw@host/x.jsonl` as `/cwd/https:/u:pw@host/x.jsonl`, which
    no URL redaction recognised."""
    from rlcore.errors import ConfigError
    from trainer.sft.data import load_rows

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_rows("https://someone:hunter2@host.invalid/x.jsonl", "train", "data.name")
    assert "hunter2" not in str(err.value) and "could not be read" in str(err.value)


# -- a dry run runs every check a start runs -----------------------------------------------------
def test_a_dry_run_refuses_an_environment_that_is_not_installed(tmp_path, monkeypatch, capsys):
    """`rl --dry-run` passed an environment a start then refused."""
    from launcher.rl import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "o.toml").write_text("[[env]]\nid = 'someone/not-installed-env'\n")
    with pytest.raises(SystemExit) as done:
        main(["--orchestrator", "@", "o.toml", "--output-dir", str(tmp_path / "run"), "--dry-run"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "someone/not-installed-env" in err and "not installed" in err
    assert list(tmp_path.iterdir()) == [tmp_path / "o.toml"]  # nothing written


def test_rl_sft_shows_its_log_in_bounded_reads_and_all_of_it_at_the_end(tmp_path, capsys):
    from launcher.sft_run import Output
    from rlcore.processes import children

    log = tmp_path / "sft.log"
    log.write_text("earlier attempt\n")
    shown = Output(log)
    lines = [f"line {i} " + "x" * 100 for i in range(3000)]  # 330 kB: several reads
    log.write_text(log.read_text() + children.HEADER + " attempt 2\n" + "\n".join(lines))
    shown.copy()
    assert capsys.readouterr().out.splitlines() == lines[:-1]  # the unfinished line waits
    shown.copy(final=True)
    assert capsys.readouterr().out == lines[-1]


@pytest.mark.timeout(30)
def test_the_supervisors_log_tail_never_waits_on_a_fifo(tmp_path):
    from launcher.supervisor import tail

    os.mkfifo(tmp_path / "trainer.log")
    assert "is a FIFO, not a regular file" in tail(tmp_path / "trainer.log")
    (tmp_path / "big.log").write_text("x\n" * 100_000 + "last\n")
    assert tail(tmp_path / "big.log", 2) == "x\nlast"
    assert tail(tmp_path / "none.log") == "(no log)"


def test_a_log_line_quoting_a_secret_flag_or_assignment_is_written_redacted():
    """A library's error logged with the user's command line or environment in it: only URLs
    were redacted in logs."""
    import io
    import logging

    from rlcore.reporting.logs import RedactingFormatter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter("%(message)s"))
    logger = logging.getLogger("test-run-folder-data")
    logger.addHandler(handler)
    try:
        logger.error("failed: vllm serve --api-key sk-live-1 with OPENAI_API_KEY=sk-live-2")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert "sk-live" not in text and "--api-key ***" in text and "OPENAI_API_KEY=***" in text


def test_plot_reads_every_record_chunk_by_chunk_within_its_bound(tmp_path):
    """`rl plot` read the last 256 MiB whole (a 2 GiB sparse metrics.jsonl: over 500 MB held);
    now chunk by chunk, keeping only the records."""
    from rlcore.files.readback import Bound
    from rlcore.reporting.metrics import read_all_records

    path = tmp_path / "metrics.jsonl"
    lines = [
        json.dumps({"component": "trainer", "step": i, "pad": "x" * 500}) for i in range(12_000)
    ]
    path.write_text("\n".join(lines) + "\n")  # 6 MB: more than one chunk
    assert [r["step"] for r in read_all_records(path)] == list(range(12_000))
    tail = read_all_records(path, bound=Bound("test", 10 * len(lines[0])))
    assert [r["step"] for r in tail] == list(range(12_000 - 9, 12_000))  # a cut line dropped


def test_an_empty_folder_to_list_is_refused_never_taken_for_the_current_one(
    tmp_path, monkeypatch, capsys
):
    """`rl list "$DIR"` with DIR unset listed the current folder's runs."""
    monkeypatch.chdir(tmp_path)
    RunDir(tmp_path / "here").claim()
    assert run_command("list", [""]) == 2
    assert "DIR '' is empty" in capsys.readouterr().err
    assert run_command("list", ["."]) == 0 and "here" in capsys.readouterr().out
