"""The GPU suite's Python pieces run on CPU, so they do not rot between lent GPUs: the
hand-written baseline loop and our trainer's benchmark each take a step of the tests' tiny
model, and the side-by-side table reads what they wrote (benchmarks/gpu_suite.sh runs the same
on a GPU with the Qwen3-0.6B-shaped presets)."""

import json

import pytest

from benchmarks import gpu_table, handwritten_loop, trainer_throughput

JOB = "tiny"


def test_the_suite_table_from_cpu_runs_of_every_step(tiny_model_dir, tmp_path, capsys):
    import torch

    model = ["--model", str(tiny_model_dir)]
    hand_json = str(tmp_path / f"hand-{JOB}.json")
    hand = handwritten_loop.main(["--preset", "tiny", *model, "--steps", "1", "--json", hand_json])
    assert hand["attention"] == "sdpa" and hand["tokens_per_step"] == 2 * 64
    assert hand["tokens_s"] > 0 and hand["peak_memory_gib"] > 0
    ours = tmp_path / f"ours-{JOB}.json"
    trainer_throughput.main(
        [
            *model,
            "--dtypes",
            "float32",
            "--batch-size",
            "2",
            "--seq-len",
            "64",
            "--steps",
            "1",
            "--ckpt-interval",
            "1000",
            "--threads",
            str(torch.get_num_threads()),
            "--json",
            str(ours),
        ]
    )
    capsys.readouterr()
    assert gpu_table.main(["--other-compile", str(ours)]) == 0
    assert capsys.readouterr().out.strip() == "--compile"  # auto compiled nothing here
    # the compiled run stays on GPUs (inductor starts processes: not in the unit tier); the
    # same run stands for it, so the compile costs nothing and never pays off
    (tmp_path / f"ours-other-{JOB}.json").write_text(ours.read_text())
    assert gpu_table.main([str(tmp_path), "--jobs", JOB]) == 0
    printed = capsys.readouterr().out
    assert "| tiny | " in printed and "paid for itself by step never" in printed
    table = json.loads((tmp_path / "table.json").read_text())
    row = table["rows"][0]
    assert row["speedup"] == row["default"]["tokens_s"] / hand["tokens_s"]
    assert [c["check"].split(":")[0] for c in table["checks"]] == [JOB, JOB]
    assert all(
        ("PASS  " if c["passed"] else "FAIL  ") + c["check"] in printed for c in table["checks"]
    )


def test_a_missing_step_output_is_named(tmp_path, capsys):
    assert gpu_table.main([str(tmp_path), "--jobs", JOB]) == 2
    assert f"ours-{JOB}.json" in capsys.readouterr().err


def test_the_step_estimate_is_compared_with_steps_no_checkpoint_write_ran_beside():
    """A checkpoint's background write shares the CPU with the next step: that step is left
    out of the measured train time the estimate is compared with, and the line says so."""
    rows = [
        {"train_s": 5.0, "ckpt_s": 0.1},  # its write slows the next step
        {"train_s": 9.0, "ckpt_s": 0.0},
        {"train_s": 6.0, "ckpt_s": 0.1},
        {"train_s": 8.0, "ckpt_s": 0.0},
    ]
    assert trainer_throughput.train_alone(rows) == (5.5, "steps after a checkpoint left out")
    quiet = [{"train_s": s, "ckpt_s": 0.0} for s in (4.0, 5.0, 6.0)]
    assert trainer_throughput.train_alone(quiet) == (5.0, "every step")
    line = trainer_throughput.estimate_line({"train_s": 5.0, "compute_s": 4.0}, 5.5, "x")
    assert line.endswith("measured 5.500 s (x), measured/estimated 1.10")


@pytest.mark.parametrize("flag", ["--steps", "--ckpt-interval"])
def test_no_timed_step_is_refused_with_the_flag_named(flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        trainer_throughput.parse_args([flag, "0"])
    assert exit_.value.code == 2 and flag in capsys.readouterr().err
