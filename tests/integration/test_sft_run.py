"""`rl sft` on the tiny model as a user runs it: the loss falls, a held-out loss is reported, a
resumed run ends with the same weights bit for bit, the final folder loads in transformers as
a model of its own, bad data exits 2 naming the file and the row, and a full disk is one
message."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcore.files.disk_full import DISK_FULL_EXIT_CODE
from rlcore.forecast.calibrate import CALIBRATION_ENV
from rlcore.runs.rundir import RunDir
from tests.integration.helpers import REPO, small_disk

pytestmark = pytest.mark.integration


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def addition_rows(count: int, start: int = 0) -> list[dict]:
    return [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} + {i % 7}?"},
                {"role": "assistant", "content": str(i + i % 7)},
            ]
        }
        for i in range(start, start + count)
    ]


def sft_toml(tmp_path: Path, model: Path, out: Path, max_steps: int = 8) -> Path:
    train = write_rows(tmp_path / "train.jsonl", addition_rows(16))
    val = write_rows(tmp_path / "val.jsonl", addition_rows(4, start=50))
    config = tmp_path / "sft.toml"
    config.write_text(
        f'max_steps = {max_steps}\nseq_len = 64\noutput_dir = "{out}"\n'
        f'[model]\nname = "{model}"\ndtype = "float32"\n[optim]\nlr = 1e-3\n'
        f'[data]\nname = "{train}"\nbatch_size = 8\n'
        f'[val]\nname = "{val}"\nsplit = "train"\ninterval = 4\n[ckpt]\ninterval = 4\n'
    )
    return config


def rl_sft(*args: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "launcher.rl", "sft", *args]
    env = {**os.environ, **(env or {})}
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)


def records(out: Path) -> dict[int, dict]:
    """The last record of each step (a resumed run appends its steps again)."""
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines)}


def weights_hash(out: Path, step: int) -> str:
    return hashlib.sha256((out / f"weights/step_{step}/model.safetensors").read_bytes()).hexdigest()


def test_sft_learns_resumes_bit_exact_and_writes_a_plain_model(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    config = sft_toml(tmp_path, tiny_model_dir, out)
    done = rl_sft("@", str(config))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first = records(out)
    assert sorted(first) == list(range(1, 9))
    assert first[8]["loss"] < first[1]["loss"] - 0.5  # 16 examples, seen 4 times
    assert first[4]["val/loss"] > first[8]["val/loss"] and "val/loss" not in first[3]
    log = (out / "logs" / "sft.log").read_text()
    assert log.count("step 8 |") == 1
    assert all(r["peak_memory_gib"] > 0.1 for r in first.values())  # the process's peak RSS
    assert "mem 0.00 GiB" not in log  # every step line said so
    final = weights_hash(out, 8)

    again = rl_sft("@", str(config), "--ckpt.resume-step", "4")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from checkpoint step 4" in again.stdout
    resumed = records(out)
    for step in (5, 6, 7, 8):
        assert resumed[step]["loss"] == first[step]["loss"]
    assert weights_hash(out, 8) == final

    from transformers import AutoModelForCausalLM

    folder = out / "weights" / "step_8"
    model = AutoModelForCausalLM.from_pretrained(folder)  # no converter, no base model
    assert json.loads((folder / "config.json").read_text())["dtype"] == "float32"
    assert (folder / "tokenizer.json").is_file() and (folder / "chat_template.jinja").is_file()
    assert model.num_parameters() > 0


def test_bad_data_exits_2_naming_the_file_and_row(tiny_model_dir, tmp_path):
    bad = write_rows(tmp_path / "bad.jsonl", addition_rows(2) + [{"question": "q"}])
    out = tmp_path / "run"
    done = rl_sft(
        "--model.name",
        str(tiny_model_dir),
        "--data.name",
        str(bad),
        "--output-dir",
        str(out),
        "--max-steps",
        "1",
    )
    assert done.returncode == 2, done.stderr
    assert f"data.name = '{bad}', row 2: has columns ['question']" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()  # nothing written


def test_a_full_disk_is_one_message_and_no_restart(tiny_model_dir, tmp_path):
    """A real 20 MiB file system, where the first checkpoint needs about 38 MiB. With its
    estimate `rl sft` refuses to start (exit 2, naming the folder and the knobs, nothing
    written). Without one (RL_CALIBRATION=off: no estimate, no disk check) the disk fills at the
    first checkpoint: `sft` names the folder it could not write and the space left, `rl sft`
    says it stopped on a full disk and restarts nothing; no traceback, and the torn checkpoint
    never counts."""
    with small_disk(tmp_path / "disk", "20m") as disk:
        out = disk / "run"
        config = sft_toml(tmp_path, tiny_model_dir, out, max_steps=2)
        args = ("@", str(config), "--ckpt.interval", "1", "--max-restarts", "2")
        refused = rl_sft(*args)
        assert refused.returncode == 2, (refused.stdout + refused.stderr)[-3000:]
        assert f"rl sft: error: {out} needs about " in refused.stderr
        assert "--ckpt.keep" in refused.stderr and "Traceback" not in refused.stderr
        assert not out.exists()  # refused before anything was written
        done = rl_sft(*args, env={CALIBRATION_ENV: "off"})
        said = done.stdout + done.stderr
        assert done.returncode == DISK_FULL_EXIT_CODE, said[-3000:]
        assert "Traceback" not in said
        ckpt = out / "checkpoints" / "step_1" / "trainer"
        assert f"sft: error: the disk is full: writing {ckpt} failed (" in said
        assert f"free of 20.0 MiB on {disk}); " in said and "--ckpt.resume-step -1" in said
        assert "rl sft: error: sft stopped: the disk is full (" in done.stderr
        assert "restarting from" not in said and said.count("step 1 |") == 1
        assert RunDir(out).latest_checkpoint() is None
