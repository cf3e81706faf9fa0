"""What the launchers print of an estimate: the block (with GPU-hours priced only when a price
is given), the job's parts read from configs (checkpoints kept, LoRA adapters, an environment's
turns, an SFT file's tokens), a shared machine's slowdown, and an estimate that cannot be made
saying why in one line, never raising."""

import json
import os
from dataclasses import replace
from types import SimpleNamespace

import pytest

from rlcore.forecast import model, report
from rlcore.forecast.calibrate import Speeds
from rlcore.forecast.model import Job
from rlcore.forecast.shape import ModelShape
from trainer.sft.config import SFTConfig

SHAPE = ModelShape(
    params=10_000, hidden=16, layers=2, vocab=100, heads=2, kv_heads=1, intermediate=32
)
FLAT = Speeds(
    matmul_flops={"bfloat16": 1e9},
    stream_bytes={"bfloat16": 1e9},
    op_s=1e-6,
    copy_bytes=1e9,
    import_s=1.0,
    threads=2,
)


def gpu_job(**extra) -> Job:
    return Job(
        max_steps=10,
        rollouts=8,
        answer_tokens=16,
        on_gpu=True,
        trainer_gpus=1,
        inference_gpus=1,
        trainer_peak=1e9,
        train_dtype="bfloat16",
        decode_dtype="bfloat16",
        gpu_memory_bytes=8e10,
        **extra,
    )


@pytest.mark.parametrize("price", [None, 2.5])
def test_the_block_prices_gpu_hours_only_when_given_a_price(price):
    result = model.estimate(gpu_job(), SHAPE, FLAT)
    lines = report.describe(result, gpu_job(), 64.0, price)
    text = "\n".join(lines)
    assert text.startswith("Estimate (") and "  step: ~" in text and "  run: ~" in text
    assert "GPU memory: trainer" in text and "GPU-hours:" in text
    assert ("$" in text) == (price is not None)
    if price:
        assert f"${result.gpu_hours * 2.5:,.2f} at $2.5/GPU-hour" in text


def test_an_sft_block_has_no_generation():
    job = Job(
        max_steps=3,
        rollouts=4,
        answer_tokens=32,
        sft=True,
        trainer_peak=1e9,
        train_dtype="bfloat16",
    )
    lines = report.describe(model.estimate(job, SHAPE, FLAT), job, 16.0, None)
    assert "(train: forward, backward and AdamW)" in lines[1] and "generate" not in lines[1]


def test_sizes_read_in_their_unit():
    assert report.gib(3 * 2**30) == "3.0 GiB"
    assert report.gib(300 * 2**20) == "300 MiB"
    assert report.gib(82_000) == "82 kB"


@pytest.mark.parametrize(
    "interval, keep, steps, expected",
    [(None, None, 25, (1, 1)), (10, 2, 25, (3, 2)), (5, None, 25, (5, 5)), (1, 3, 4, (4, 3))],
)
def test_checkpoints_saved_and_kept(interval, keep, steps, expected):
    ckpt = SimpleNamespace(enabled=True, interval=interval, keep=keep)
    assert report.checkpoint_counts(ckpt, steps) == expected
    off = SimpleNamespace(enabled=False, interval=interval, keep=keep)
    assert report.checkpoint_counts(off, steps) == (0, 0)


def test_lora_adapters_from_each_targets_shape():
    lora = SimpleNamespace(rank=4, target_modules=["q_proj", "k_proj", "down_proj"])
    # q: 16 -> 2 x 8, k: 16 -> 1 x 8, down: 32 -> 16; rank x (in + out), 2 layers
    assert report.lora_trainable(lora, SHAPE) == 4 * ((16 + 16) + (16 + 8) + (32 + 16)) * 2
    assert report.lora_trainable(None, SHAPE) is None


@pytest.mark.parametrize(
    ("vllm_args", "on_gpu", "tokens"),
    [({}, False, 128), ({}, True, 16), ({"block_size": 32}, False, 32)]
    + [({"block-size": 64}, True, 64), ({"block_size": "32"}, False, 128)],
)
def test_the_kv_block_is_vllm_args_or_vllms_default(vllm_args, on_gpu, tokens):
    assert report.block_tokens(vllm_args, on_gpu) == tokens


def test_an_environments_turns_come_from_its_args_or_its_source():
    assert report.environment_turns("rl-guess-number", {"max_turns": 5}) == 5
    assert report.environment_turns("rl-guess-number", {}) == 2  # load_environment's default
    assert report.environment_turns("rl-add-digits", {}) == 1
    assert report.environment_turns("no-such-env-here", {}) == 1


def test_an_sft_files_tokens_from_its_first_rows(tmp_path):
    data = tmp_path / "train.jsonl"
    rows = [{"messages": [{"role": "user", "content": "x" * 100}]}] * 10
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    per_row = len(json.dumps(rows[0])) / report.CHARS_PER_TOKEN  # 47 characters of JSON too
    assert per_row == (100 + 47) / 4
    assert report.data_tokens(str(data), 2048) == int(per_row)
    assert report.data_tokens(str(data), 8) == 8  # at most seq_len
    assert report.data_tokens("org/hub-dataset", 100) == int(100 * model.ANSWER_FILL)


def test_an_sft_file_that_is_no_regular_file_is_guessed_not_waited_on(tmp_path):
    fifo = tmp_path / "train.jsonl"
    os.mkfifo(fifo)  # opened without a writer, a plain read would wait for ever
    assert report.data_tokens(str(fifo), 100) == int(100 * model.ANSWER_FILL)
    assert report.data_tokens(str(tmp_path), 100) == int(100 * model.ANSWER_FILL)  # a folder


def test_validation_rows_are_counted_in_regular_files_only_and_never_waited_on(tmp_path):
    fifo = tmp_path / "val.jsonl"
    os.mkfifo(fifo)
    assert report.val_rows(str(fifo)) == 0
    assert report.val_rows(str(tmp_path)) == 0  # a folder (or a hub name): not counted here
    assert report.val_rows("") == 0
    assert report.val_rows(str(tmp_path / "missing.jsonl")) == 0
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"a": 1}\n\n{"a": 2}\n')  # blank lines are no rows
    assert report.val_rows(str(rows)) == 2
    link = tmp_path / "link.jsonl"
    link.symlink_to(rows)  # the user's own file through a link reads as the file
    assert report.val_rows(str(link)) == 2


@pytest.mark.parametrize(
    ("output", "tokens"),
    [
        (f"{report.TOKENS_SAID}50.3\n", 50.3),
        (f"noise\n{report.TOKENS_SAID}7\n", 7.0),
        (f"{report.TOKENS_SAID}nan-ish\n", None),
        (f"{report.TOKENS_SAID}-4\n", None),
        (f"{report.TOKENS_SAID}1e400\n", None),
        (f"{report.TOKENS_SAID}{'9' * 5000}\n", None),
        ("sft: data: something else 12\n", None),
        ("", None),
    ],
)
def test_the_tokens_the_data_check_said_are_read_back_as_untrusted_text(output, tokens):
    assert report.tokens_said(output) == tokens


def test_an_sft_estimate_takes_the_tokens_the_data_check_counted(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "x" * 40}]}) + "\n")
    config = SFTConfig.model_validate(
        {"model": {"dtype": "float32"}, "data": {"name": str(data)}, "seq_len": 64}
    )
    guessed = report.sft_job(config, None, SHAPE, None)
    assert guessed.answer_tokens == int((40 + 47) / 4)
    assert report.sft_job(config, None, SHAPE, 50.4).answer_tokens == 50
    assert report.sft_job(config, None, SHAPE, 500.0).answer_tokens == 64  # at most seq_len


@pytest.mark.parametrize(
    ("kernel", "on_gpu", "masked_rows", "may_compile", "whole"),
    [
        ("auto", False, True, False, True),  # shared prompts: sdpa with their mask
        ("auto", False, False, True, True),  # a compiled model keeps sdpa
        ("auto", False, False, False, False),  # sample by sample
        ("auto", True, True, True, False),  # a GPU's variable-length kernels
        ("sdpa", True, False, False, True),
        ("eager", False, False, False, True),
        ("varlen", False, True, True, False),
        ("flash_attention_2", True, False, False, False),
    ],
)
def test_which_kernels_attend_a_packed_row_whole(kernel, on_gpu, masked_rows, may_compile, whole):
    assert report.attends_whole_rows(kernel, on_gpu, masked_rows, may_compile) is whole


def test_an_sft_row_is_attended_whole_only_where_sdpa_runs(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "x", "completion": "y"}) + "\n")
    fields = {"data": {"name": str(data)}, "seq_len": 64}
    plain = SFTConfig.model_validate({"model": {"dtype": "float32"}, **fields})
    compiled = SFTConfig.model_validate({"model": {"dtype": "float32", "compile": True}, **fields})
    assert not report.sft_job(plain, None, SHAPE, 40.0).row_attention  # sample by sample
    job = report.sft_job(compiled, None, SHAPE, 40.0)
    assert job.row_attention and job.compiled


def test_an_sft_runs_validations_are_in_its_steps_by_hand(tmp_path):
    """`[val]` every 4 steps of 10 (steps 4, 8 and the last): 3 forwards over its 5 rows of 50
    tokens, each a third of a training pass over as many tokens, spread over the steps."""
    data, val = tmp_path / "train.jsonl", tmp_path / "val.jsonl"
    data.write_text(json.dumps({"prompt": "p", "completion": "c"}) + "\n")
    val.write_text((json.dumps({"prompt": "p", "completion": "c"}) + "\n") * 5)
    config = SFTConfig.model_validate(
        {
            "model": {"dtype": "float32"},
            "data": {"name": str(data), "batch_size": 2},
            "val": {"name": str(val), "split": "train", "interval": 4},
            "seq_len": 64,
            "max_steps": 10,
        }
    )
    job = report.sft_job(config, None, SHAPE, 50.0)
    assert job.validation_tokens == 3 * 5 * 50
    speeds = replace(FLAT, matmul_flops={"float32": 1e9})
    forward = model.cpu_train_compute_s(job, SHAPE, speeds, 750, 50) / 3
    assert model.validation_s(job, SHAPE, speeds) == pytest.approx(forward)
    phases = model.step_phases(job, SHAPE, speeds, job.answer_mean)
    assert phases["validate"] == pytest.approx(forward / 10)
    assert phases["step"] == pytest.approx(phases["train"] + forward / 10)
    # at most val.num_examples of them; none without [val]
    fewer = config.model_copy(update={"val": config.val.model_copy(update={"num_examples": 2})})
    assert report.sft_job(fewer, None, SHAPE, 50.0).validation_tokens == 3 * 2 * 50
    none = config.model_copy(update={"val": None})
    assert report.sft_job(none, None, SHAPE, 50.0).validation_tokens == 0
    # a split of the training data is not counted here: only through val.num_examples
    split = config.model_copy(update={"val": config.val.model_copy(update={"name": None})})
    assert report.sft_job(split, None, SHAPE, 50.0).validation_tokens == 0
    bounded = split.model_copy(update={"val": split.val.model_copy(update={"num_examples": 4})})
    assert report.sft_job(bounded, None, SHAPE, 50.0).validation_tokens == 3 * 4 * 50


def test_a_busy_machine_stretches_cpu_times(monkeypatch):
    from rlcore.forecast import calibrate

    machine = SimpleNamespace(num_cpus=2)
    monkeypatch.setattr(calibrate, "runnable_now", lambda: None)  # the load average alone
    monkeypatch.setattr("os.getloadavg", lambda: (0.1, 0.1, 0.1))
    assert report.shared(machine) == (1.0, [])
    monkeypatch.setattr("os.getloadavg", lambda: (6.0, 6.0, 6.0))
    slowdown, words = report.shared(machine)
    assert slowdown == pytest.approx(1 + model.LOAD_WEIGHT * 6 / 2)
    assert "6.0 threads busy on 2 CPUs" in words[0]
    cpu = Job(max_steps=2, rollouts=4, answer_tokens=8, trainer_peak=1.0)
    quiet, busy = model.estimate(cpu, SHAPE, FLAT), model.estimate(cpu, SHAPE, FLAT, slowdown)
    assert busy.step_s == pytest.approx(quiet.step_s * slowdown)


def test_a_plan_without_the_measurement_says_why_in_one_line(monkeypatch, tiny_model_dir):
    from launcher.forecast import forecast
    from launcher.prepare import build_plan
    from launcher.rl_config import RLConfig

    config = RLConfig.model_validate({"model": {"name": str(tiny_model_dir)}})
    plan = build_plan(config, dry_run=True)  # RL_CALIBRATION=off in the unit tier
    assert plan.forecast is None
    assert plan.estimate == [
        "Estimate: not made (the speed measurement is off: RL_CALIBRATION=off)"
    ]
    monkeypatch.setattr(report, "speeds", lambda *a: FLAT)
    monkeypatch.setenv("RL_CALIBRATION", "on")
    made, lines = forecast(plan)
    assert made is not None and lines[0].startswith("Estimate (") and len(lines) > 5
    assert made.speeds is FLAT  # what run_checks caches once every check has passed
    assert "(measured now in 0.0 s; cached once the run starts; " in "\n".join(lines)
    _, dry = forecast(plan, dry_run=True)
    assert "(measured now in 0.0 s; not cached: a dry run writes nothing; " in "\n".join(dry)

    def broken(*args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(report, "speeds", broken)
    assert forecast(plan) == (None, ["Estimate: not made (RuntimeError: a bug)"])


def test_the_archive_at_the_end_is_within_its_bound():
    """Past `samples.max_gib` (or its default share of the free space) the orchestrator deletes
    the oldest steps' files: a long run's archive ends at the bound, not at every step's files."""
    job = Job(max_steps=10**6, rollouts=4, answer_tokens=8, archive_bound=2**20)
    assert model.disk(job, SHAPE, 8)["rollout archive"] == 2**20
    short = Job(max_steps=1, rollouts=4, answer_tokens=8, archive_bound=2**20)
    per_step = 4 * ((model.PROMPT_TOKENS + 8) * model.ARCHIVE_BYTES_PER_TOKEN)
    assert model.disk(short, SHAPE, 8)["rollout archive"] == pytest.approx(
        per_step + 4 * model.ARCHIVE_BYTES_PER_ROLLOUT
    )


@pytest.mark.parametrize(
    "max_tokens, seq_len, prompt, bound",
    [(256, 256, 44, 212), (64, 256, 44, 64), (256, 512, 44, 256), (256, 256, 300, 1)],
)
def test_an_answer_is_bounded_by_the_room_after_its_prompt(max_tokens, seq_len, prompt, bound):
    """The orchestrator caps a request at what `seq_len` leaves after its prompt: the 256-token
    job's answers stop at 212, and so do the estimate's."""
    from launcher.forecast import answer_bound
    from launcher.rl_config import RLConfig

    config = RLConfig.model_validate({"seq_len": seq_len, "sampling": {"max_tokens": max_tokens}})
    assert answer_bound(config, prompt) == bound
