"""`evals` / `rl eval` as a user runs them: one policy evaluated from its folder (evals' own
server), from a running server (`client.base_url`) and from a run's checkpoint (`--run`) gives
the same results and summary for the same seed; bad input exits 2 naming the key."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.inference_process import InferenceProcess
from tests.integration.helpers import REPO, free_port

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


def rl_eval(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "launcher.rl", "eval", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)


def results(out: Path) -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return rows, json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_folder_server_and_run_checkpoint_agree(tiny_model_dir, tmp_path):
    run = tmp_path / "sft"
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+1=", "completion": str(i + 1)}) + "\n"
                            for i in range(8)))  # fmt: skip
    sft = [sys.executable, "-m", "launcher.rl", "sft", "--model.name", str(tiny_model_dir),
           "--model.dtype", "float32", "--data.name", str(data), "--max-steps", "1",
           "--seq-len", "64", "--output-dir", str(run)]  # fmt: skip
    done = subprocess.run(sft, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = run / "weights" / "step_1"

    own = rl_eval("@", str(eval_toml(tmp_path, folder, tmp_path / "own")))
    assert own.returncode == 0, own.stderr[-3000:]
    assert "rl-add-digits" in own.stdout and "pass@1" in own.stdout
    from_run = rl_eval("@", str(eval_toml(tmp_path, folder, tmp_path / "run")), "--run", str(run),
                       "--step", "1")  # fmt: skip
    assert from_run.returncode == 0, from_run.stderr[-3000:]
    port = free_port()
    args = ["--model.name", str(folder), "--model.dtype", "float32", "--server.port", str(port),
            "--deterministic", "--output-dir", str(tmp_path / "served"), "--model.max-model-len",
            "256", "--cpu.kvcache-space-gib", "1"]  # fmt: skip
    with InferenceProcess(args, tmp_path / "inference.log") as server:
        server.wait_ready(timeout_s=600)
        served = rl_eval("@", str(eval_toml(tmp_path, folder, tmp_path / "server")),
                         "--client.base-url", f"{server.url}/v1")  # fmt: skip
    assert served.returncode == 0, served.stderr[-3000:]

    own_rows, own_summary = results(tmp_path / "own")
    assert len(own_rows) == 12 and own_summary["rl-add-digits"]["num_rollouts"] == 12
    assert len({json.dumps(r["completion"]) for r in own_rows}) > 1  # sampled, not fixed
    for other in ("run", "server"):
        assert results(tmp_path / other) == (own_rows, own_summary), other


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--step", "3"], "step = 3 needs `run`"),
        (["--run", "no-such-run"], "--run no-such-run --step -1:"),
        (["--eval.env", "[]"], "eval.env is empty"),
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
