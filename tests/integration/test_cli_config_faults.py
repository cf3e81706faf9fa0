# ruff: noqa: E501  (the case table reads best one case per line)
"""Fault matrix, malformed configs and flags: each case exits 2 with a message that names the
place and the fix, starts no process and writes no file."""

import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rlcore.runs.rundir import RunDir
from tests.integration.helpers import small_disk

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

GOOD_TRAIN = "max_steps = 3\n"
# (name, files {name: text}, argv, words the message must contain)
CASES = [
    (
        "unquoted string",
        {"t.toml": "[model]\nname = Qwen/Qwen3-0.6B\n"},
        ["--trainer", "@", "t.toml"],
        ["t.toml:2:", '"Qwen/Qwen3-0.6B"'],
    ),
    (
        "unclosed table",
        {"t.toml": "[model\nname = 'x'\n"},
        ["--trainer", "@", "t.toml"],
        ["t.toml:1:"],
    ),
    (
        "duplicate key",
        {"t.toml": "max_steps = 1\nmax_steps = 2\n"},
        ["--trainer", "@", "t.toml"],
        ["t.toml:2:"],
    ),
    (
        "unknown top-level key",
        {"rl.toml": "max_stepz = 3\n"},
        ["@", "rl.toml"],
        ["max_stepz", "rl.toml", "max_steps"],
    ),
    (
        "unknown key in trainer file",
        {"t.toml": "[optim]\nlrate = 1\n"},
        ["--trainer", "@", "t.toml"],
        ["trainer.optim.lrate", "t.toml", "lr"],
    ),
    (
        "unknown flag",
        {},
        ["--trainer.optim.lrr", "1"],
        ["--trainer.optim.lrr", "--trainer.optim.lr"],
    ),
    (
        "unknown section",
        {"t.toml": GOOD_TRAIN},
        ["--trainr", "@", "t.toml"],
        ["--trainr", "--trainer"],
    ),
    ("wrong type flag", {}, ["--max-steps", "ten"], ["--max-steps", "'ten'", "integer"]),
    (
        "wrong type in file",
        {"o.toml": "[sampling]\ntemperature = 'hot'\n"},
        ["--orchestrator", "@", "o.toml"],
        ["o.toml", "sampling.temperature"],
    ),
    (
        "gpu ids not integers",
        {},
        ["--inference-gpu-ids", "a,b"],
        ["inference_gpu_ids", "--inference-gpu-ids"],
    ),
    (
        "negative temperature",
        {},
        ["--orchestrator.sampling.temperature", "-0.5"],
        ["--orchestrator.sampling.temperature", "greater than 0"],
    ),
    (
        "greedy temperature",
        {},
        ["--orchestrator.sampling.temperature", "0"],
        ["--orchestrator.sampling.temperature", "greedy", "> 0"],
    ),
    (
        "batch not divisible",
        {},
        ["--orchestrator.batch-size", "10", "--orchestrator.rollouts-per-example", "4"],
        ["batch_size", "divisible"],
    ),
    (
        "max_tokens > seq_len",
        {},
        ["--seq-len", "128", "--orchestrator.sampling.max-tokens", "129"],
        ["max_tokens", "above seq_len"],
    ),
    ("zero interval", {}, ["--ckpt.interval", "0"], ["ckpt.interval", "greater than 0"]),
    ("resume step below -1", {}, ["--ckpt.resume-step", "-2"], ["resume_step", "-1"]),
    (
        "top level vs section",
        {},
        ["--max-steps", "3", "--trainer.max-steps", "4"],
        ["--max-steps", "--trainer.max-steps"],
    ),
    (
        "trainer vs orchestrator files",
        {"t.toml": "seq_len = 512\n", "o.toml": "seq_len = 1024\n"},
        ["--trainer", "@", "t.toml", "--orchestrator", "@", "o.toml"],
        ["t.toml", "o.toml", "seq_len"],
    ),
    (
        "overlapping gpu ids",
        {},
        ["--inference-gpu-ids", "0,1", "--trainer-gpu-ids", "1"],
        ["--inference-gpu-ids", "--trainer-gpu-ids", "[1]"],
    ),
    (
        "gpu count vs dp x tp",
        {},
        ["--inference-gpu-ids", "0,1,2", "--inference.parallel.tp", "2"],
        ["--inference-gpu-ids", "tp"],
    ),
    ("gpu listed twice", {}, ["--trainer-gpu-ids", "3,3"], ["--trainer-gpu-ids", "twice"]),
    ("missing file", {}, ["--trainer", "@", "nope.toml"], ["nope.toml", "does not exist"]),
    ("@ without file", {}, ["--trainer", "@"], ["--trainer @", "TOML file"]),
    ("directory as file", {"d/x.toml": ""}, ["@", "d"], ["d is a directory"]),
    ("positional without @", {}, ["rl.toml"], ["@ rl.toml"]),
    ("unknown loss type", {}, ["--trainer.loss.type", "ppo"], ["loss", "ratio_clip"]),
    (
        "vllm_args clash",
        {"i.toml": "[vllm_args]\nport = 9\n"},
        ["--inference", "@", "i.toml"],
        ["vllm_args", "server.port"],
    ),
    (
        "base url vs inference port",
        {},
        ["--orchestrator.client.base-url", "http://127.0.0.1:9999/v1"],
        ["base_url", "inference.server.port"],
    ),
    (
        "missing environment",
        {"o.toml": "[[env]]\nid = 'someone/not-installed-env'\n"},
        ["--orchestrator", "@", "o.toml"],
        ["someone/not-installed-env", "not installed", "install"],
    ),
    (
        "model folder missing",
        {},
        ["--model.name", "./no/such/model"],
        ["./no/such/model", "does not exist"],
    ),
    ("resume a step with no checkpoint", {}, ["--ckpt.resume-step", "5"], ["step 5", "-1"]),
]


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def run_rl(tmp_path: Path, argv: list[str], free_port: bool = True) -> subprocess.CompletedProcess:
    code = "import sys; from launcher.rl import main; main(sys.argv[1:])"
    with socket.socket() as sock:  # a free port, so a server running elsewhere cannot interfere
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    argv = [*argv, "--output-dir", str(tmp_path / "run")]
    argv += ["--inference.server.port", port] if free_port else []
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={
            "PYTHONPATH": str(REPO),
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "RL_CACHE_DIR": str(MACHINE_CACHE),
        },
    )


@pytest.mark.parametrize(("name", "files", "argv", "words"), CASES, ids=[c[0] for c in CASES])
def test_malformed_config_is_a_clear_user_error(tmp_path, name, files, argv, words):
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    before = snapshot(tmp_path)
    result = run_rl(tmp_path, argv)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    missing = [w for w in words if w not in result.stderr]
    assert not missing, f"{missing} not in: {result.stderr}"
    assert snapshot(tmp_path) == before, "a failed start must write nothing"


REFUSED_AT_START = [
    (
        "bad .env line",
        {".env": 'GOOD=1\nBAD LINE "open\n'},
        [],
        [".env, line 2", "NAME=value", "#"],
    ),
    (
        "unset $VAR",
        {"o.toml": "[[env]]\nid = 'rl-add-digits'\nargs = { api_key = '$RL_TEST_UNSET' }\n"},
        ["--orchestrator", "@", "o.toml"],
        [
            "orchestrator.env[0].args.api_key = '$RL_TEST_UNSET'",
            "$RL_TEST_UNSET is not set",
            ".env",
        ],
    ),
]


@pytest.mark.parametrize("mode", [[], ["--dry-run"]], ids=["start", "dry"])
@pytest.mark.parametrize(
    ("name", "files", "argv", "words"), REFUSED_AT_START, ids=[c[0] for c in REFUSED_AT_START]
)
def test_a_dry_run_refuses_what_a_start_refuses(tmp_path, name, files, argv, words, mode):
    """A `.env` line that cannot be read and a `$VAR` set nowhere were found by the processes
    once started (a dry run said nothing), as `rl init` refuses them before anything."""
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    before = snapshot(tmp_path)
    result = run_rl(tmp_path, [*argv, *mode])
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "# resolved config" not in result.stdout
    missing = [w for w in words if w not in result.stderr]
    assert not missing, f"{missing} not in: {result.stderr}"
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("mode", [[], ["--dry-run"]], ids=["start", "dry"])
@pytest.mark.parametrize("out", ["out", "out/new"], ids=["folder", "parent"])
def test_a_read_only_output_folder_is_refused_by_start_and_dry_run(tmp_path, out, mode):
    """A folder on a file system mounted read-only (an empty one, or one that would hold a
    new run): the start tracebacked writing the marker, a dry run accepted it."""
    with small_disk(tmp_path / "disk", "64g", read_only=("out",)) as disk:
        root = disk / out
        code = "import sys; from launcher.rl import main; main(sys.argv[1:])"
        result = subprocess.run(
            [sys.executable, "-c", code, "--output-dir", str(root), *mode],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            env={
                "PYTHONPATH": str(REPO),
                "PATH": "/usr/bin:/bin",
                "HOME": str(tmp_path),
                "RL_CACHE_DIR": str(MACHINE_CACHE),
            },
        )
        assert result.returncode == 2, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        holder = "it" if out == "out" else f"'{disk / 'out'}', which would hold it,"
        assert (
            f"output_dir = '{root}' cannot be written: {holder} is not writable (its file "
            "system is mounted read-only); pick another --output-dir"
        ) in result.stderr
        assert [p.name for p in disk.rglob("*")] == ["out"]


def test_port_in_use(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = run_rl(tmp_path, ["--inference.server.port", str(port)], free_port=False)
    assert result.returncode == 2 and f"port {port}" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


def test_existing_checkpoints_need_resume_or_clean(tmp_path):
    RunDir(tmp_path / "run").claim()
    manifest = tmp_path / "run" / "checkpoints" / "step_2" / "MANIFEST"
    manifest.parent.mkdir(parents=True)
    manifest.write_text("{}")
    before = snapshot(tmp_path)
    result = run_rl(tmp_path, [])
    assert result.returncode == 2
    assert all(w in result.stderr for w in ("--ckpt.resume-step -1", "--clean", "--output-dir"))
    assert snapshot(tmp_path) == before


MACHINE_CACHE = Path(tempfile.gettempdir()) / "rl-test-machine-cache"
"""The machine's calibration cache (rl's own, kept per machine like the model cache), out of
the folders these tests snapshot: what they prove is that a failed start writes nothing of a
run and none of the user's files."""

HOLD = (
    "import sys, time; from pathlib import Path; from rlcore.runs.runguard import hold_run; "
    "hold_run(Path(sys.argv[1])); print('held', flush=True); time.sleep(120)"
)


def hold(root: Path) -> subprocess.Popen:
    """A process that holds the run in `root` the way a running rl does."""
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("flags", [[], ["--clean"], ["--dry-run"]], ids=["start", "clean", "dry"])
def test_a_run_another_rl_runs_is_left_alone(tmp_path, flags):
    run = RunDir(tmp_path / "run")
    run.claim()
    run.rollout_dir(3).mkdir(parents=True)  # a fresh start would drop it, --clean delete it
    (run.rollout_dir(3) / "batch.bin").write_text("live")
    holder = hold(run.root)
    try:
        run.run_json.write_text(json.dumps({"status": "running", "launcher_pid": holder.pid}))
        before = snapshot(tmp_path)
        result = run_rl(tmp_path, flags)
        assert result.returncode == 2, result.stdout + result.stderr
        words = [f"in use by pid {holder.pid}", "exclusive lock", "rl stop", "--output-dir"]
        assert all(w in result.stderr for w in words), result.stderr
        assert snapshot(tmp_path) == before
    finally:
        holder.kill()
        holder.wait()
    hold(run.root).kill()  # the lock died with its holder: the folder can be taken again


def test_an_orchestrator_alone_leaves_a_running_rl_alone(tmp_path):
    run = RunDir(tmp_path / "run")
    run.claim()
    run.rollout_dir(3).mkdir(parents=True)  # a fresh orchestrator would drop it
    holder = hold(run.root)
    try:
        before = snapshot(tmp_path)
        result = subprocess.run(
            [sys.executable, "-m", "orchestrator.main", "--output-dir", str(run.root)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            env={
                "PYTHONPATH": str(REPO),
                "PATH": "/usr/bin:/bin",
                "HOME": str(tmp_path),
                "RL_CACHE_DIR": str(MACHINE_CACHE),
            },
        )
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"in use by pid {holder.pid}" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
        assert snapshot(tmp_path) == before
    finally:
        holder.kill()
        holder.wait()
