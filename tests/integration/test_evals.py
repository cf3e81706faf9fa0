"""`evals` / `rl eval` as a user runs them: one policy evaluated from its folder (evals' own
server), from a running server (`client.base_url`) and from a run's checkpoint (`--run`) gives
the same results and summary for the same seed; bad input exits 2 naming the key."""

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcore.runs.ownership import RUN_MARKER
from tests.inference_process import InferenceProcess
from tests.integration.helpers import REPO, free_port, wait_for
from tests.wandb_offline import offline_history

pytestmark = pytest.mark.integration


def eval_toml(tmp_path: Path, model: Path, out: Path) -> Path:
    config = tmp_path / f"{out.name}.toml"
    config.write_text(
        f'output_dir = "{out}"\nseq_len = 256\n[model]\nname = "{model}"\n'
        "[sampling]\nmax_tokens = 8\n"
        '[[eval.env]]\nid = "rl-add-digits"\nnum_examples = 4\nrollouts_per_example = 3\n'
        '[inference]\nmodel = { dtype = "float32" }\ncpu = { kvcache_space_gib = 1 }\n'
    )
    return config


def sft_run(tmp_path: Path, model: Path, *flags: str) -> Path:
    """A finished `rl sft` run of the tiny model on 8 prompt/completion rows."""
    run, data = tmp_path / "sft", tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": f"{i}+1=", "completion": str(i + 1)}) + "\n" for i in range(8)
        )
    )
    sft = [
        sys.executable,
        "-m",
        "launcher.rl",
        "sft",
        "--model.name",
        str(model),
        "--model.dtype",
        "float32",
        "--data.name",
        str(data),
        "--seq-len",
        "64",
        "--output-dir",
        str(run),
        *flags,
    ]
    done = subprocess.run(sft, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def rl_eval(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "launcher.rl", "eval", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)


def results(out: Path) -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return rows, json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_folder_server_and_run_checkpoint_agree(tiny_model_dir, tmp_path):
    run = sft_run(tmp_path, tiny_model_dir, "--max-steps", "1")
    folder = run / "weights" / "step_1"

    own = rl_eval("@", str(eval_toml(tmp_path, folder, tmp_path / "own")))
    assert own.returncode == 0, own.stderr[-3000:]
    assert "rl-add-digits" in own.stdout and "pass@1" in own.stdout
    from_run = rl_eval(
        "@", str(eval_toml(tmp_path, folder, tmp_path / "run")), "--run", str(run), "--step", "1"
    )
    assert from_run.returncode == 0, from_run.stderr[-3000:]
    port = free_port()
    args = [
        "--model.name",
        str(folder),
        "--model.dtype",
        "float32",
        "--server.port",
        str(port),
        "--deterministic",
        "--output-dir",
        str(tmp_path / "served"),
        "--model.max-model-len",
        "256",
        "--cpu.kvcache-space-gib",
        "1",
    ]
    with InferenceProcess(args, tmp_path / "inference.log") as server:
        server.wait_ready(timeout_s=600)
        served = rl_eval(
            "@",
            str(eval_toml(tmp_path, folder, tmp_path / "server")),
            "--client.base-url",
            f"{server.url}/v1",
        )
    assert served.returncode == 0, served.stderr[-3000:]

    own_rows, own_summary = results(tmp_path / "own")
    assert len(own_rows) == 12 and own_summary["rl-add-digits"]["num_rollouts"] == 12
    assert len({json.dumps(r["completion"]) for r in own_rows}) > 1  # sampled, not fixed
    for other in ("run", "server"):
        assert results(tmp_path / other) == (own_rows, own_summary), other


@pytest.mark.slow
def test_watch_evaluates_each_new_policy_of_a_live_run(tiny_model_dir, tmp_path):
    """A run holding its folder (here this test, as a component started alone would) with
    step 1 ready: the watch evaluates it on a server of its own; step 2 appears (its checkpoint
    and weights moved in) as the run ends: the same server swaps to it and evaluates it, and
    the watch ends. Each step's figures land in the run's metrics.jsonl, and step 2's, written
    after the run ended, in the run's own (offline) W&B run, which the watch continued."""
    wandb = ("--wandb.project", "watch-test", "--wandb.offline")
    run = sft_run(tmp_path, tiny_model_dir, "--max-steps", "2", "--ckpt.interval", "1", *wandb)
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for part in ("checkpoints", "weights"):
        (run / part / "step_2").rename(hidden / part)

    out = tmp_path / "watch"
    lock = os.open(run / RUN_MARKER, os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_SH)  # the run is live
    config = eval_toml(tmp_path, tiny_model_dir, out)
    cmd = [
        sys.executable,
        "-m",
        "launcher.rl",
        "eval",
        "@",
        str(config),
        "--watch",
        str(run),
        "--watch-interval-s",
        "1",
    ]
    log = tmp_path / "watch.log"
    with log.open("w") as sink:
        watcher = subprocess.Popen(cmd, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_for(
            lambda: (out / "step_1" / "summary.json").is_file(),
            600,
            "step 1",
            proc=watcher,
            log=log,
        )
        for part in ("checkpoints", "weights"):
            (hidden / part).rename(run / part / "step_2")
        os.close(lock)  # the run ends
        assert watcher.wait(timeout=600) == 0, log.read_text()[-3000:]
    finally:
        watcher.kill()
    server_log = (out / "inference.log").read_text()
    assert server_log.count("now serving") == 1 and "step_2" in server_log
    evals = [
        r
        for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if r["component"] == "evals"
    ]
    assert [r["step"] for r in evals] == [1, 2]
    for record in evals:
        summary = json.loads((out / f"step_{record['step']}" / "summary.json").read_text())
        assert record["rl-add-digits/pass@1"] == summary["rl-add-digits"]["pass@1"]
        assert record["rl-add-digits/num_rollouts"] == 12
    assert "has ended; evaluated steps [1, 2]" in log.read_text()
    rows = offline_history(run)
    sft_ids = {p.name.rsplit("-", 1)[1] for p in (run / "wandb").glob("offline-run-*")}
    assert len(sft_ids) == 1, sft_ids  # the watch continued the SFT run's W&B run
    relayed = [
        (r["evals/step"], r["evals/rl-add-digits/pass@1"]) for r in rows if "evals/step" in r
    ]
    assert relayed == [(2, evals[1]["rl-add-digits/pass@1"])]
    assert [r["trainer/step"] for r in rows if "trainer/step" in r] == [1, 2]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--step", "3"], "step = 3 needs `run`"),
        (["--run", "no-such-run"], "--run: no run 'no-such-run'"),
        (["--eval.env", "[]"], "eval.env is empty"),
        (["--watch", "a", "--run", "b"], "give one (--watch follows a run"),
        (["--watch", "no-such-run"], "--watch: no run 'no-such-run'"),
    ],
)
def test_bad_input_exits_2_naming_the_key(tiny_model_dir, tmp_path, args, words):
    done = rl_eval("@", str(eval_toml(tmp_path, tiny_model_dir, tmp_path / "out")), *args)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr


def test_a_users_folder_is_never_written_into(tiny_model_dir, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    done = rl_eval("@", str(eval_toml(tmp_path, tiny_model_dir, mine)))
    assert done.returncode == 2 and "is not empty and is not a run" in done.stderr, done.stderr
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
