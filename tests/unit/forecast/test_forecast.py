"""The estimate's arithmetic against hand-computed values, the model's shape from a GGUF header
and from an HF folder, the calibration's cache, the time left from measured steps, and an
estimate that cannot be made saying why in one line."""

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from known_speeds import FLAT, SMALL

from rlcore.forecast import calibrate, model, progress
from rlcore.forecast.model import Job, TurnAnswers
from rlcore.forecast.shape import ModelShape, folder_shape, gguf_shape


def test_forward_flops_are_two_per_parameter_and_token_plus_attention():
    assert SMALL.matmul_params == 1000  # tied: the head multiplies, the lookup does not
    assert model.forward_flops(SMALL, 3) == 3 * 2 * 1000
    # attention: 4 x layers x hidden x context per token = 4 * 2 * 10 * 5 = 400
    assert model.forward_flops(SMALL, 3, context=5) == 3 * (2000 + 400)
    assert model.train_flops(SMALL, 3, 0, lora=False) == 18_000
    assert model.train_flops(SMALL, 3, 0, lora=True) == 12_000


def test_the_head_runs_at_the_loss_tokens_only_by_hand():
    """32 tokens, 8 of them the loss's: the body's 500 parameters 3x at all 32, the head's 500
    4x at the 8; frozen (LoRA) 2x and 3x; without loss tokens (SFT) 3x everywhere."""
    job = Job(max_steps=1, rollouts=4)
    assert model.product_flops(job, SMALL, 32, 8) == 3 * 2 * 500 * 32 + 4 * 2 * 500 * 8
    frozen = replace(job, trainable=10)
    assert model.product_flops(frozen, SMALL, 32, 8) == 2 * 2 * 500 * 32 + 3 * 2 * 500 * 8
    assert model.product_flops(job, SMALL, 32, None) == 3 * 2 * 1000 * 32
    # with three quarters of the tokens the loss's, the head costs what it did at every token
    assert model.product_flops(job, SMALL, 32, 24) == model.product_flops(job, SMALL, 32, None)
    two_turns = replace(job, answers=(TurnAnswers(1.0, 6, 8), TurnAnswers(0.5, 4, 4, 20)))
    assert model.policy_tokens(two_turns, 6.0) == 4 * (6 + 0.5 * 4)  # not the 20 added


def test_an_untied_head_counts_once_and_the_embedding_lookup_never():
    untied = ModelShape(params=1500, hidden=10, layers=2, vocab=50, tied=False)
    assert untied.matmul_params == 1500 - 500
    assert SMALL.kv_width == 2 * 1 * 5  # keys and values of one kv head of width 10 / 2


def products_by_hand(tokens: float, loss: float | None, passes: float = 3.0) -> float:
    """SMALL's products (1,000 matmul parameters, of which its head's 50 x 10 = 500): the body
    `passes` x a forward at every token, the head one more at the `loss` tokens (its backward
    computes the logits again), or like the body at every token where `loss` is None."""
    if loss is None:
        return passes * 2 * 1000 * tokens
    return passes * 2 * 500 * tokens + (passes + 1) * 2 * 500 * loss


def cpu_train_by_hand(
    tokens: float, context: float, passes: float = 3.0, rate=1e9, fp32=1e9, loss=None
):
    """A CPU's forward + backward of SMALL (2 layers of 10) by hand: products at the dtype's
    rate, attention at fp32's, the element-wise rest at the copy rate (1e9 bytes/s)."""
    products = products_by_hand(tokens, loss, passes) / (rate * model.CPU_PRODUCT_EFFICIENCY)
    attention = 3 * tokens * 4 * 2 * 10 * context / (fp32 * model.CPU_ATTENTION_EFFICIENCY)
    elementwise = tokens * 2 * 10 * model.CPU_ELEMENTWISE_BYTES / 1e9
    return products + attention + elementwise


def test_train_seconds_by_hand():
    job = Job(
        max_steps=1,
        rollouts=4,
        rollouts_per_example=2,
        prompt_tokens=10,
        answer_tokens=8,
        micro_batch_tokens=1000,
    )
    answer = 8.0
    tokens = 2 * 10 + 4 * 8  # each group's prompt once, every answer
    assert model.train_tokens(job, answer) == tokens
    adam = model.ADAM_BYTES_PER_PARAM * 1000 / 1e9
    # the loss uses the 4 answers of 8: 32 tokens
    expected = cpu_train_by_hand(tokens, 10 + 8, loss=32) + adam  # op_s = 0: no fixed work
    assert model.train_s(job, SMALL, FLAT, answer) == pytest.approx(expected)


def test_a_cpu_runs_attention_at_the_fp32_rate_in_any_dtype_by_hand():
    """bf16 products at their own (twice fp32's) rate, sdpa's attention at fp32's; where fp32
    was not measured (an older record), at the dtype's."""
    job = Job(max_steps=1, rollouts=4, rollouts_per_example=2, prompt_tokens=10, answer_tokens=8)
    job = replace(job, micro_batch_tokens=1000, train_dtype="bfloat16")
    both = replace(FLAT, matmul_flops={"bfloat16": 2e9, "float32": 1e9})
    adam = model.ADAM_BYTES_PER_PARAM * 1000 / 1e9
    expected = cpu_train_by_hand(52, 18, rate=2e9, loss=32) + adam
    assert model.train_s(job, SMALL, both, 8.0) == pytest.approx(expected)
    alone = replace(FLAT, matmul_flops={"bfloat16": 2e9})
    expected = cpu_train_by_hand(52, 18, rate=2e9, fp32=2e9, loss=32) + adam
    assert model.train_s(job, SMALL, alone, 8.0) == pytest.approx(expected)


def gpu_compute_by_hand(tokens: int, context: int, width: int = 10, loss: int = 32) -> float:
    """SMALL's forward + backward on a GPU at 1 GFLOP/s: its products (`products_by_hand`) at
    the products' efficiency, 3 x its attention (4 x 2 layers x the queries' width x context a
    token) at attention's."""
    products = products_by_hand(tokens, loss)
    attention = 3 * tokens * 4 * 2 * width * context
    return products / (1e9 * model.GPU_PRODUCT_EFFICIENCY) + attention / (
        1e9 * model.GPU_ATTENTION_EFFICIENCY
    )


def test_a_gpu_step_is_its_products_and_attention_at_their_efficiencies_by_hand():
    job = Job(max_steps=1, rollouts=4, rollouts_per_example=2, prompt_tokens=10, answer_tokens=8)
    job = replace(job, micro_batch_tokens=1000, on_gpu=True, trainer_gpus=2)
    adam = model.ADAM_BYTES_PER_PARAM * 1000 / 1e9  # no device copy rate: the host's
    expected = (gpu_compute_by_hand(52, 18) + adam) / 2  # two shards
    assert model.train_s(job, SMALL, FLAT, 8.0) == pytest.approx(expected)


def test_a_gpu_step_compiled_recomputed_and_at_the_devices_copy_rate_by_hand():
    """Compiled: the compute times GPU_COMPILED; every layer checkpointed: a fourth forward;
    AdamW at the GPU's own copy rate; the step's fixed work in GPU_TRAIN_STEP_OPS, whatever
    the samples."""
    job = Job(max_steps=1, rollouts=4, rollouts_per_example=2, prompt_tokens=10, answer_tokens=8)
    job = replace(job, micro_batch_tokens=1000, on_gpu=True, trainer_gpus=1)
    speeds = replace(FLAT, device_copy_bytes=4e9, op_s=1e-6)
    adam = model.ADAM_BYTES_PER_PARAM * 1000 / 4e9
    fixed = model.GPU_TRAIN_STEP_OPS * 1e-6
    dispatch = model.TRAIN_OPS_PER_LAYER * 2 * 1e-6  # 2 layers, one micro-batch
    compute = gpu_compute_by_hand(52, 18)
    parts = model.train_parts(job, SMALL, speeds, 8.0)
    assert parts["compute"] == pytest.approx(compute)
    assert parts["optimizer"] == pytest.approx(adam)
    assert parts["fixed"] == pytest.approx(fixed)
    assert sum(parts.values()) == pytest.approx(compute + adam + fixed + dispatch)
    both = replace(job, compiled=True, recompute=1.0)
    expected = compute * model.GPU_COMPILED * 4 / 3
    assert model.train_parts(both, SMALL, speeds, 8.0)["compute"] == pytest.approx(expected)
    half = replace(job, recompute=0.5)  # every second layer: half a forward again
    expected = compute * (1 + 0.5 / 3)
    assert model.train_parts(half, SMALL, speeds, 8.0)["compute"] == pytest.approx(expected)


def test_attention_scales_with_the_queries_width_not_the_hidden_size_by_hand():
    """Qwen3-0.6B has 16 heads of 128 on a 1,024-wide model: its attention is twice what the
    hidden size says."""
    wide = replace(SMALL, heads=2, head_dim=10)  # queries 20 wide on a 10-wide model
    assert wide.query_width == 20
    assert SMALL.query_width == 10
    job = Job(max_steps=1, rollouts=4, rollouts_per_example=2, prompt_tokens=10, answer_tokens=8)
    job = replace(job, micro_batch_tokens=1000, on_gpu=True, trainer_gpus=1)
    compute = model.train_parts(job, wide, FLAT, 8.0)["compute"]
    assert compute == pytest.approx(gpu_compute_by_hand(52, 18, width=20))


def test_a_gpu_publish_is_one_host_copy_by_hand():
    job = Job(max_steps=1, rollouts=4, on_gpu=True, trainer_gpus=1, served_bytes=2)
    assert model.publish_s(job, SMALL, FLAT) == pytest.approx(1000 * 2 / 1e9)
    cpu = replace(job, on_gpu=False, trainer_gpus=0)
    assert model.publish_s(cpu, SMALL, FLAT) == pytest.approx(model.PUBLISH_COPIES * 2000 / 1e9)


def test_attention_over_a_packed_row_counts_the_whole_row_by_hand():
    """With the shared-prompt mask (sdpa), every token of a row is computed against every
    other: the context is the row, 52 tokens here, not the sample's 18."""
    job = Job(
        max_steps=1,
        rollouts=4,
        rollouts_per_example=2,
        prompt_tokens=10,
        answer_tokens=8,
        micro_batch_tokens=1000,
        row_attention=True,
    )
    adam = model.ADAM_BYTES_PER_PARAM * 1000 / 1e9
    expected = cpu_train_by_hand(52, 52, loss=32) + adam
    assert model.train_s(job, SMALL, FLAT, 8.0) == pytest.approx(expected)
    # two micro-batches of 26 tokens: each row half as long
    two = replace(job, micro_batch_tokens=30)
    expected = cpu_train_by_hand(52, 26, loss=32) + adam
    assert model.train_s(two, SMALL, FLAT, 8.0) == pytest.approx(expected)


# A decode product of 1,000 parameters (4 kB in fp32): 1 us at one row, 4 us at 32 rows.
ROWS = replace(FLAT, stream_bytes={"float32": 1e9}, stream_one_bytes={"float32": 4e9})


def test_a_turns_decode_by_hand():
    """Each iteration streams the weights once (1 us); each answer token adds its row's share
    of the 32-row product beyond one ((4 - 1) / 32 us) and its attention; a wave iterates until
    its longest answer ends."""
    job = Job(max_steps=1, rollouts=8, max_concurrent=4)
    turn = model.TurnAnswers(share=0.5, mean=3.0, longest=10.0)
    # 4 rollouts reach the turn: one wave of 4, 10 iterations, 12 answer tokens
    fixed = 4000 / 4e9
    per_row = (4000 / 1e9 - 4000 / 4e9) / 32 + 4 * 2 * 10 * (20 + 3 / 2) / 1e9
    assert model.decode_s(job, SMALL, ROWS, turn, context=20) == pytest.approx(
        10 * fixed + 12 * per_row
    )
    # all 8: two waves of 4 (20 iterations)
    whole = model.TurnAnswers(share=1.0, mean=3.0, longest=10.0)
    assert model.decode_s(job, SMALL, ROWS, whole, context=20) == pytest.approx(
        20 * fixed + 24 * per_row
    )
    # an older calibration without the one-row rate: every row's cost is fixed
    old = replace(ROWS, stream_one_bytes={})
    assert model.decode_s(job, SMALL, old, whole, context=20) == pytest.approx(
        20 * 4000 / 1e9 + 24 * 4 * 2 * 10 * 21.5 / 1e9
    )


def test_answers_are_taken_at_their_bound_until_an_earlier_run_measured_them():
    bound = Job(max_steps=1, rollouts=4, answer_tokens=16, turns=2, prompt_tokens=10)
    assert model.turn_answers(bound, 12.0) == (
        model.TurnAnswers(1.0, 12.0, 16.0, 0.0),
        model.TurnAnswers(1.0, 12.0, 16.0, 10.0),  # the environment adds a prompt's worth
    )
    measured = (model.TurnAnswers(1.0, 5.0, 9.0), model.TurnAnswers(0.5, 4.0, 6.0, 3.0))
    job = replace(bound, answers=measured)
    assert model.turn_answers(job, 12.0) == measured
    assert model.completion_tokens(job, 12.0) == 5.0 + 0.5 * (4.0 + 3.0)
    # the range around measured answers is the machine's alone
    result = model.estimate(replace(job, trainer_peak=1.0), SMALL, ROWS)
    assert result.wall_range == pytest.approx(
        (model.WALL_RANGE[0] * result.wall_s, model.WALL_RANGE[1] * result.wall_s)
    )


def test_a_multi_turn_generation_by_hand():
    """The second turn prefills its context grown by the first answer and the environment's
    reply, but for the previous request's whole KV blocks, then decodes its own rollouts."""
    measured = (model.TurnAnswers(1.0, 5.0, 9.0), model.TurnAnswers(0.5, 4.0, 6.0, 3.0))
    job = Job(
        max_steps=1,
        rollouts=4,
        rollouts_per_example=4,
        prompt_tokens=10,
        answer_tokens=16,
        block_tokens=128,
        answers=measured,
    )
    first = model.forward_flops(SMALL, 4 * 10, 10) / 1e9
    first += model.decode_s(job, SMALL, ROWS, measured[0], 10)
    decode = model.decode_s(job, SMALL, ROWS, measured[1], 18)
    # 128-token blocks: the 15 tokens of the first request fill none, all 18 are computed
    second = model.forward_flops(SMALL, 2 * 18, 18) / 1e9 + decode
    assert model.generate_s(job, SMALL, ROWS, 0.0) == pytest.approx(first + second)
    # 8-token blocks: the first request's 15 tokens leave one whole block, 10 tokens computed
    small = replace(job, block_tokens=8)
    first = model.forward_flops(SMALL, model.prefill_tokens(small), 10) / 1e9
    first += model.decode_s(small, SMALL, ROWS, measured[0], 10)
    second = model.forward_flops(SMALL, 2 * (18 - 8), 18) / 1e9 + decode
    assert model.generate_s(small, SMALL, ROWS, 0.0) == pytest.approx(first + second)


def test_the_kv_cache_bounds_the_rollouts_decoded_at_once():
    """SMALL keeps 2 layers x 10 elements a token, 80 bytes in fp32: 640 a block of 8 tokens,
    so 6,400 bytes are 10 blocks; a rollout at its longest (10 + 6 tokens) takes 2, so 5 run
    at once, the 12 in 3 waves: as with max_concurrent 5 and no bound."""
    turn = model.TurnAnswers(1.0, 4.0, 6.0)
    job = Job(max_steps=1, rollouts=12, prompt_tokens=10, block_tokens=8, served_bytes=4)
    bounded = replace(job, kv_cache_bytes=6400.0)
    assert model.kv_sequences(bounded, SMALL, 10, turn) == 5
    assert model.kv_sequences(job, SMALL, 10, turn) == math.inf  # a GPU's share: unknown
    assert model.kv_sequences(replace(job, kv_cache_bytes=100.0), SMALL, 10, turn) == 1
    no_size = replace(SMALL, hidden=1, heads=4)  # a head narrower than a unit: no token size
    assert model.kv_sequences(bounded, no_size, 10, turn) == math.inf
    assert model.decode_s(bounded, SMALL, ROWS, turn, 10) == pytest.approx(
        model.decode_s(replace(job, max_concurrent=5), SMALL, ROWS, turn, 10)
    )
    assert model.decode_s(bounded, SMALL, ROWS, turn, 10) > model.decode_s(
        job, SMALL, ROWS, turn, 10
    )


def test_each_request_adds_its_own_work():
    """Every turn of every rollout reaching it is a request: REQUEST_OPS tiny ops each, beside
    the step's GENERATE_STEP_OPS."""
    measured = (model.TurnAnswers(1.0, 5.0, 9.0), model.TurnAnswers(0.5, 4.0, 6.0, 3.0))
    job = Job(max_steps=1, rollouts=4, prompt_tokens=10, answer_tokens=16, answers=measured)
    ops = replace(ROWS, op_s=1e-6)
    added = model.generate_s(job, SMALL, ops, 0.0) - model.generate_s(job, SMALL, ROWS, 0.0)
    decode_ops = sum(
        model.decode_s(job, SMALL, ops, t, c) - model.decode_s(job, SMALL, ROWS, t, c)
        for t, c in zip(measured, (10, 18), strict=True)
    )
    requests = 4 + 2
    expected = (model.GENERATE_STEP_OPS + requests * model.REQUEST_OPS) * 1e-6 + decode_ops
    assert added == pytest.approx(expected)


def test_the_prefix_cache_shares_only_whole_blocks_of_a_groups_prompt():
    job = Job(max_steps=1, rollouts=8, rollouts_per_example=4, prompt_tokens=44)
    assert model.prefill_tokens(job) == 8 * 44  # vLLM's 128-token blocks on CPU: none full
    assert model.prefill_tokens(replace(job, block_tokens=32)) == 2 * 32 + 8 * 12
    assert model.prefill_tokens(replace(job, block_tokens=11)) == 2 * 44


# LoRA: 100 adapter parameters on 2 projections of each of SMALL's 2 layers.
LORA = dict(trainable=100, lora_targets=2, served_dtype="float32")
LORA_SPEEDS = replace(
    FLAT, op_s=1e-6, lora_bytes={"float32": 2e9}, lora_prefill_bytes={"float32": 1e9}
)


def lora_job(**extra) -> Job:
    job = Job(max_steps=1, rollouts=4, rollouts_per_example=2, prompt_tokens=10, answer_tokens=8)
    return replace(job, micro_batch_tokens=1000, **{**LORA, **extra})


def test_a_lora_step_trains_the_adapters_on_top_of_the_frozen_base_by_hand():
    job, answer = lora_job(), 6.0
    tokens = 2 * 10 + 4 * 6
    base = cpu_train_by_hand(tokens, 10 + 6, passes=2.0, loss=24)  # no weight gradients
    adapters = 6 * 100 * tokens  # forward 2 x 100 a token, backward twice that
    rate = 1e9 * model.LORA_PRODUCT_EFFICIENCY
    ops = model.TRAIN_OPS_PER_LAYER * 2 + model.LORA_TRAIN_OPS * 2 * 2  # 1 micro-batch
    ops += model.TRAIN_STEP_OPS + model.TRAIN_SAMPLE_OPS * 4  # the step's and its 4 samples'
    adam = model.ADAM_BYTES_PER_PARAM * 100 / 1e9  # the adapters' moments only
    expected = base + adapters / rate + ops * 1e-6 + adam
    assert model.train_s(job, SMALL, LORA_SPEEDS, answer) == pytest.approx(expected)
    assert model.lora_train_s(job, SMALL, LORA_SPEEDS, tokens, 1) == pytest.approx(
        adapters / rate + model.LORA_TRAIN_OPS * 2 * 2 * 1e-6
    )


def test_serving_an_adapter_on_a_cpu_gathers_it_for_every_token_by_hand():
    job, answer = lora_job(), 6.0
    adapter = 100 * 4  # fp32 bytes, copied for each token
    prefill = 4 * 10 * adapter / 1e9  # every rollout's prompt, at the prefill rate
    decode = 4 * 6 * adapter / 2e9  # every answer token, at the decode rate
    calls = 8 * 2 * 2 * 2  # iterations x layers x projections x (shrink, expand)
    expected = prefill + decode + calls * model.LORA_OPS_PER_CALL * 1e-6
    assert model.lora_generate_s(job, SMALL, LORA_SPEEDS, answer) == pytest.approx(expected)
    plain = replace(job, trainable=None, lora_targets=0)
    assert model.generate_s(job, SMALL, LORA_SPEEDS, answer) == pytest.approx(
        model.generate_s(plain, SMALL, LORA_SPEEDS, answer) + expected
    )


def test_an_adapter_costs_generation_nothing_on_a_gpu_or_without_a_lora_measurement():
    assert model.lora_generate_s(lora_job(on_gpu=True), SMALL, LORA_SPEEDS, 6.0) == 0.0
    assert model.lora_generate_s(lora_job(), SMALL, FLAT, 6.0) == 0.0
    bf16 = lora_job(served_dtype="bfloat16")  # not measured: the slowest measured rates
    assert model.lora_generate_s(bf16, SMALL, LORA_SPEEDS, 6.0) == pytest.approx(
        4 * 10 * 200 / 1e9 + 4 * 6 * 200 / 2e9 + 64 * model.LORA_OPS_PER_CALL * 1e-6
    )


def test_a_lora_runs_first_steps_are_generated_by_the_base_policy():
    job = lora_job(max_steps=5, async_level=1, trainer_peak=1.0)
    result = model.estimate(job, SMALL, LORA_SPEEDS)
    base = replace(job, adapter_served=False)  # no adapter yet: vLLM skips its prefill
    phases = model.step_phases(base, SMALL, LORA_SPEEDS, job.answer_mean)
    base_step = phases["step"]
    assert base_step < result.step_s
    # the start holds the first batch's generation, by the base policy: nothing overlaps it
    start = model.start_s(job, SMALL, LORA_SPEEDS) + phases["generate"]
    assert result.start_s == pytest.approx(start) and result.warmup_s == phases["generate"]
    # batch 1 is the base policy's too; batch 4, the last, is trained alone (nothing to
    # generate any more), and batches 2 and 3 are generated with the adapter
    last = result.phases["train"] + result.phases["publish"]
    end = result.end_s
    assert result.wall_s == pytest.approx(start + base_step + 3 * result.step_s + last + end)


def test_the_last_step_trains_alone_in_any_run_but_sft():
    job = Job(max_steps=6, rollouts=8, answer_tokens=16, trainer_peak=1.0)
    for async_level in (0, 1, 2):
        result = model.estimate(replace(job, async_level=async_level), SMALL, LORA_SPEEDS)
        last = result.phases["train"] + result.phases["publish"]
        assert result.wall_s == pytest.approx(
            result.start_s + 5 * result.step_s + last + result.end_s
        )
    sft = model.estimate(replace(job, sft=True), SMALL, LORA_SPEEDS)
    assert sft.wall_s == pytest.approx(sft.start_s + 6 * sft.step_s + sft.end_s)
    one = model.estimate(replace(job, max_steps=1), SMALL, LORA_SPEEDS)
    last = one.phases["train"] + one.phases["publish"]
    assert one.wall_s == pytest.approx(one.start_s + last + one.end_s)


def test_checkpoint_and_disk_bytes_by_hand():
    job = Job(
        max_steps=10,
        rollouts=4,
        prompt_tokens=10,
        answer_tokens=8,
        checkpoints_kept=2,
        policy_folders=1,
        served_bytes=4,
        tokenizer_bytes=300.0,
    )
    # fp32 weights and two moments, and the tied 50 x 10 embedding saved a second time
    one = 12 * 1000 + 4 * 500 + model.CHECKPOINT_FIXED
    assert model.checkpoint_bytes(job, SMALL) == one
    parts = model.disk(job, SMALL, answer=6.0)
    assert parts["checkpoints"] == 2 * one
    assert parts["weights"] == 4 * 1000 + 300
    per_step = 4 * ((10 + 6) * model.ARCHIVE_BYTES_PER_TOKEN + model.ARCHIVE_BYTES_PER_ROLLOUT)
    assert parts["rollout archive"] == pytest.approx(10 * per_step)
    lora = Job(max_steps=1, rollouts=1, trainable=100)
    assert model.checkpoint_bytes(lora, SMALL) == 12 * 100 + model.CHECKPOINT_FIXED


def test_inference_memory_counts_weights_a_packed_copy_and_the_kv_cache():
    job = Job(
        max_steps=1, rollouts=1, served_bytes=4, decode_dtype="bfloat16", kv_cache_bytes=5000.0
    )
    # fp32 weights, oneDNN's bf16 packed copy, the whole KV cache, vLLM's own processes
    assert model.inference_memory(job, SMALL) == 4000 + 2000 + 5000 + model.INFERENCE_BASE
    fp32 = Job(max_steps=1, rollouts=1, served_bytes=4, kv_cache_bytes=5000.0)
    assert model.inference_memory(fp32, SMALL) == 4000 + 4000 + 5000 + model.INFERENCE_BASE
    gpu = Job(max_steps=1, rollouts=1, served_bytes=2, on_gpu=True)
    assert model.inference_memory(gpu, SMALL) == 2000 + model.INFERENCE_BASE


def test_steps_overlap_on_gpus_and_add_up_on_shared_cores_where_they_contend():
    base = dict(max_steps=4, rollouts=8, answer_tokens=16, trainer_peak=1.0)
    cpu = model.step_phases(Job(**base), SMALL, FLAT, 12.0)
    gpu = model.step_phases(Job(**base, on_gpu=True, trainer_gpus=1), SMALL, FLAT, 12.0)
    sync = model.step_phases(Job(**base, async_level=0), SMALL, FLAT, 12.0)
    trainer_side = cpu["train"] + cpu["publish"]
    assert gpu["step"] == pytest.approx(max(gpu["generate"], gpu["train"] + gpu["publish"]))
    assert sync["step"] == pytest.approx(cpu["generate"] + trainer_side)
    # an async run on one CPU: both at once, each slowed by the other's threads
    contended = model.SHARED_CORES_CONTENTION * (cpu["generate"] + trainer_side)
    assert cpu["step"] == pytest.approx(contended) and cpu["step"] > sync["step"]
    assert cpu["wait"] == pytest.approx(cpu["step"] - cpu["generate"])


def test_the_whole_estimate_adds_its_parts():
    job = Job(
        max_steps=10,
        rollouts=8,
        answer_tokens=16,
        trainer_peak=2.0 * model.GIB,
        on_gpu=True,
        trainer_gpus=1,
        inference_gpus=1,
        gpu_memory_bytes=80 * model.GIB,
    )
    result = model.estimate(job, SMALL, FLAT)
    assert result.wall_s == pytest.approx(result.start_s + 10 * result.step_s + result.end_s)
    assert result.wall_range[0] < result.wall_s < result.wall_range[1]
    assert result.gpu_hours == pytest.approx(2 * result.wall_s / 3600)
    assert set(result.gpu_memory) == {"trainer", "inference"}
    record = result.record()
    assert json.loads(json.dumps(record))["wall_s"] == round(result.wall_s, 1)


def test_a_compiled_trainer_pays_its_compile_once_and_steps_faster_by_hand():
    """Compiled, a CPU step's compute takes CPU_COMPILED of the eager one's (0.9 in bf16),
    and the first step adds the compile: COMPILE_IMPORTS import units from a cold cache,
    COMPILE_CACHED_IMPORTS from a warm one (FLAT: 1 s a unit), in the wall and on its own."""
    speeds = replace(FLAT, matmul_flops={"float32": 1e9, "bfloat16": 2e9})
    eager = Job(max_steps=5, rollouts=4, answer_tokens=8, train_dtype="bfloat16", async_level=0)
    compiled = replace(eager, compiled=True)
    tokens, context = model.train_tokens(eager, 8.0), eager.prompt_tokens + 8.0
    compute = model.cpu_train_compute_s(eager, SMALL, speeds, tokens, context, 32.0)
    assert model.cpu_train_compute_s(
        compiled, SMALL, speeds, tokens, context, 32.0
    ) == pytest.approx(0.9 * compute)
    assert model.compile_s(eager, speeds) == 0.0
    assert model.compile_s(compiled, speeds) == model.COMPILE_IMPORTS == 18.0
    assert model.compile_s(replace(compiled, compile_cached=True), speeds) == 4.0
    slow = model.estimate(compiled, SMALL, speeds, slowdown=2.0)
    assert slow.compile_s == 36.0  # CPU work: stretched on a shared machine like the rest
    result = model.estimate(compiled, SMALL, speeds)
    steps = 4 * result.step_s + result.phases["train"] + result.phases["publish"]
    assert result.wall_s == pytest.approx(result.start_s + steps + 18.0 + result.end_s)
    assert result.record()["compile_s"] == 18.0
    fast = model.estimate(replace(compiled, compile_cached=True), SMALL, speeds)
    assert result.wall_s - fast.wall_s == pytest.approx(14.0)
    assert model.estimate(eager, SMALL, speeds).compile_s == 0.0


def test_the_time_left_holds_the_compile_until_the_first_step():
    """The estimate's compile counts before the trainer's first step, after the first batch
    too, and is gone once that step is seen; the estimate's own steps on average leave it out,
    so the time left at the start is the wall time."""
    estimate = {"step_s": 10.0, "wall_s": 80.0, "start_s": 20.0, "end_s": 2.0, "compile_s": 18.0}
    clock = progress.from_estimate(estimate | {"warmup_s": 0.0}, 4, start=100.0)
    assert clock.estimated_step_s == pytest.approx(10.0)  # (80 - 20 - 2 - 18) / 4
    assert clock.left_s(100.0) == pytest.approx(80.0)
    clock.batch_done(1, 120.0)
    assert clock.left_s(120.0) == pytest.approx(4 * 10.0 + 18.0 + 2.0)
    assert clock.left_s(150.0) == pytest.approx(4 * 10.0 + 18.0 - 30.0 + 2.0)
    clock.step_done(1, 160.0)
    assert clock.left_s(160.0) == pytest.approx(3 * 10.0 + 2.0)
    for damaged in (-1.0, math.nan, "18", True, None):
        read = progress.from_estimate(estimate | {"compile_s": damaged}, 4)
        assert read.estimated_compile_s == 0.0


def test_an_sft_job_has_no_inference():
    job = Job(max_steps=3, rollouts=4, answer_tokens=32, sft=True, trainer_peak=1.0)
    result = model.estimate(job, SMALL, FLAT)
    assert result.phases["generate"] == result.phases["publish"] == 0.0
    assert result.warmup_s == 0.0  # no batch to generate before the first step
    start = model.start_s(job, SMALL, FLAT)
    assert result.wall_s == pytest.approx(start + 3 * result.step_s + result.end_s)
    assert set(result.memory) == {"trainer"}
    assert result.disk["rollout archive"] == 0.0


def write_gguf(path: Path, tied: bool) -> None:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_head_count_kv(1)
    writer.add_vocab_size(20)
    writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(20)])
    writer.add_tensor("token_embd.weight", np.zeros((20, 8), dtype=np.float32))
    writer.add_tensor("blk.0.ffn_up.weight", np.zeros((16, 8), dtype=np.float32))
    if not tied:
        writer.add_tensor("output.weight", np.zeros((20, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("tied", [True, False])
def test_a_gguf_header_gives_the_shape(tmp_path, tied):
    path = tmp_path / "m.gguf"
    write_gguf(path, tied)
    shape = gguf_shape(path)
    params = 160 + 128 + (0 if tied else 160)
    assert shape == ModelShape(
        params=params,
        hidden=8,
        layers=2,
        vocab=20,
        heads=2,
        kv_heads=1,
        intermediate=16,
        tied=tied,
        architecture="LlamaForCausalLM",  # general.architecture `llama`, as transformers names it
    )


@pytest.mark.parametrize("data", [b"", b"GGUF", b"GGUF\x03\x00\x00\x00" + b"\xff" * 16, b"PK\x03"])
def test_a_damaged_gguf_is_no_shape(tmp_path, data):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    assert gguf_shape(path) is None


def test_the_bundled_model_shape_is_known_before_it_is_unpacked(tmp_path, monkeypatch):
    from rlcore.config.base import DEFAULT_MODEL
    from rlcore.forecast.shape import shape_of
    from rlcore.host.models import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))  # a fresh clone: nothing converted yet
    shape, source = shape_of(DEFAULT_MODEL)
    assert source == "the bundled GGUF's header"
    assert (shape.params, shape.layers, shape.hidden, shape.vocab) == (134_515_008, 30, 576, 49152)


def test_a_folder_shape_reads_config_and_headers(tiny_model_dir):
    shape = folder_shape(tiny_model_dir)
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert shape.hidden == config["hidden_size"] and shape.layers == config["num_hidden_layers"]
    assert shape.params > 0


def test_a_hub_model_is_not_estimated_and_says_why():
    from rlcore.forecast.shape import shape_of

    shape, why = shape_of("some-org/some-model")
    assert shape is None and "no local folder" in why


# -- the calibration's cache -------------------------------------------------------------
MACHINE = {
    "arch": "x86_64",
    "model": "CPU",
    "isa": "avx512_bf16",
    "hardware_isa": "avx512_bf16",
    "capped_by": "",
    "num_cpus": 2,
    "num_gpus": 0,
    "gpu_name": "",
}


def test_the_fingerprint_changes_with_the_machine_caps_and_versions(monkeypatch):
    key = calibrate.fingerprint(MACHINE, ["float32"])
    assert calibrate.fingerprint(dict(MACHINE, memory_gib=99), ["float32"]) == key
    assert calibrate.fingerprint(dict(MACHINE, isa="avx2", capped_by="X=1"), ["float32"]) != key
    assert calibrate.fingerprint(MACHINE, ["bfloat16", "float32"]) != key
    monkeypatch.setattr(calibrate, "versions", lambda: {"torch": "0.0.1"})
    assert calibrate.fingerprint(MACHINE, ["float32"]) != key


def test_a_cached_calibration_is_reused_and_a_damaged_one_measured_again(tmp_path, monkeypatch):
    from rlcore.host.models import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    measured = {
        "matmul_flops": {"float32": 2e9},
        "stream_bytes": {"float32": 1e9},
        "op_s": 1e-6,
        "copy_bytes": 5e9,
        "import_s": 2.0,
        "threads": 2,
    }
    runs = []
    monkeypatch.setattr(
        calibrate, "run_child", lambda dtypes, device: runs.append((dtypes, device)) or measured
    )
    first = calibrate.speeds(MACHINE, ["float32"])
    assert list(tmp_path.iterdir()) == [], "a measurement writes nothing until kept"
    calibrate.keep(first)
    again = calibrate.speeds(MACHINE, ["float32"])
    assert len(runs) == 1 and not first.cached and again.cached
    assert again.matmul_flops == {"float32": 2e9} and runs == [(["float32"], "cpu")]
    calibrate.cache_file(first.fingerprint).write_text("{not json")
    calibrate.speeds(MACHINE, ["float32"])
    assert len(runs) == 2


def test_keep_writes_only_a_new_measurement(tmp_path, monkeypatch):
    from rlcore.host.models import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    calibrate.keep(None)
    calibrate.keep(replace(FLAT, fingerprint="abc", cached=True))
    calibrate.keep(replace(FLAT, fingerprint=""))
    assert list(tmp_path.iterdir()) == []
    calibrate.keep(replace(FLAT, fingerprint="abc", lora_bytes={"float32": 3e9}))
    kept = calibrate.read_cache("abc")
    assert kept is not None and kept.cached and kept.lora_bytes == {"float32": 3e9}


def test_a_kept_gpu_measurement_reads_back_as_one(tmp_path, monkeypatch):
    """The cache keeps the device under `extra`: read back, the record is still the GPU's,
    with the GPU's own copy rate."""
    from rlcore.host.models import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    measured = {
        "matmul_flops": {"bfloat16": 7e14},
        "stream_bytes": {"bfloat16": 2e12},
        "op_s": 3e-6,
        "copy_bytes": 7e9,
        "device_copy_bytes": 2e12,
        "import_s": 5.0,
        "threads": 16,
        "device": "cuda",
    }
    monkeypatch.setattr(calibrate, "run_child", lambda dtypes, device: measured)
    first = calibrate.speeds(MACHINE, ["bfloat16"], "cuda")
    calibrate.keep(first)
    again = calibrate.speeds(MACHINE, ["bfloat16"], "cuda")
    assert again.cached and again.extra["device"] == "cuda" == first.extra["device"]
    assert again.device_copy_bytes == 2e12


GOOD_RECORD = (
    '{"matmul_flops": {"float32": 2e9}, "stream_bytes": {"float32": 1e9}, "op_s": 1e-6, '
    '"copy_bytes": 1e9, "import_s": 1.0, "threads": 2}'
)


@pytest.mark.parametrize(
    "forged",
    [
        ('"copy_bytes": 1e9', '"copy_bytes": 0'),
        ('"float32": 2e9', '"float32": -2e9'),
        ('"float32": 2e9', '"float32": 1e400'),  # read back as infinity
        ('{"float32": 2e9}', "{}"),
        ('"op_s": 1e-6', '"op_s": -1'),
        ('"threads": 2', '"threads": 0'),
        ('"threads": 2', '"threads": 2, "device_copy_bytes": -1'),
        ('"threads": 2', '"threads": 2, "device_copy_bytes": 1e400'),
        ('"threads": 2', '"threads": 2, "extra": "cuda"'),
    ],
)
def test_a_cached_rate_the_estimate_would_divide_by_must_be_finite_and_positive(
    tmp_path, monkeypatch, forged
):
    """A forged or damaged record with a zero, negative or infinite rate is no record: it is
    measured again, where it would have made the estimate 'not made (ZeroDivisionError...)'."""
    from rlcore.host.models import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    path = calibrate.cache_file("abc")
    path.parent.mkdir(parents=True)
    path.write_text(GOOD_RECORD)
    assert calibrate.read_cache("abc") is not None
    path.write_text(GOOD_RECORD.replace(*forged))
    assert calibrate.read_cache("abc") is None
    with pytest.raises(ValueError, match="not a calibration record"):
        calibrate.from_record(json.loads(GOOD_RECORD.replace(*forged)), "abc", cached=False)


@pytest.mark.parametrize("damage", ["fifo", "deep", "bytes", "list", "huge"])
def test_a_damaged_cache_entry_is_measured_again_never_read_on_trust(tmp_path, monkeypatch, damage):
    """The cache lives in the user's cache folder, which anything may have written: a FIFO is
    refused without blocking, a 100,000-deep JSON or any bytes are no record."""
    import os

    from rlcore.host.models import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    path = calibrate.cache_file("abc")
    path.parent.mkdir(parents=True)
    if damage == "fifo":
        os.mkfifo(path)
    elif damage == "deep":
        path.write_text("[" * 100_000)
    elif damage == "bytes":
        path.write_bytes(b"\xff\xfe{\x00")
    elif damage == "list":
        path.write_text(json.dumps({"matmul_flops": [1], "stream_bytes": {}}))
    else:
        path.write_text(json.dumps({"pad": "x" * 200_000}))
    assert calibrate.read_cache("abc") is None


def test_a_failed_calibration_is_named(tmp_path, monkeypatch):
    from rlcore.host.models import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(calibrate, "run_child", lambda dtypes, device: {"matmul_flops": "nonsense"})
    with pytest.raises(calibrate.CalibrationError, match="no usable figures"):
        calibrate.speeds(MACHINE, ["float32"])


# -- the time left ---------------------------------------------------------------------------
def test_the_time_left_follows_measured_steps_and_reaches_zero():
    clock = progress.Progress(
        max_steps=10, estimated_step_s=10.0, estimated_end_s=5.0, policy=progress.PACE
    )
    # before the trainer's first step: every step, its warm-up (one more) and the end
    assert clock.left_s(0.0) == 10 * 10.0 + 10.0 + 5.0
    clock.step_done(1, 100.0)  # the first step's end starts the first interval
    assert clock.intervals() == []
    assert clock.left_s(100.0) == 9 * 10.0 + 5.0  # its warm-up is behind it
    clock.step_done(2, 104.0)  # one interval of 4 s, the estimate counted once
    assert clock.pace_s() == pytest.approx((4.0 + 10.0) / 2)
    assert clock.left_s(104.0) == pytest.approx(8 * 7.0 + 5.0)
    clock.step_done(3, 110.0)  # two intervals: their median alone
    assert clock.pace_s() == pytest.approx(5.0)
    assert clock.left_s(112.0) == pytest.approx(7 * 5.0 - 2.0 + 5.0)
    for done in range(4, 11):
        clock.step_done(done, 110.0 + 5.0 * (done - 3))
    assert clock.left_s(145.0) == pytest.approx(5.0)  # the end (the last checkpoint) is left
    assert clock.left_s(151.0) == 0.0


def test_what_is_left_of_the_start_counts_until_the_first_step():
    clock = progress.Progress(4, 10.0, 2.0, start=100.0, estimated_start_s=30.0)
    assert clock.left_s(100.0) == 30.0 + 4 * 10.0 + 10.0 + 2.0
    assert clock.left_s(120.0) == 10.0 + 4 * 10.0 + 10.0 + 2.0
    assert clock.left_s(150.0) == 4 * 10.0 + 10.0 + 2.0  # later than estimated: nothing more


def test_the_first_batch_ends_the_start_whenever_it_comes():
    """Once the first batch is written, the start and its generation are behind: the steps
    count from that batch, whether the start ran early or late against its estimate."""
    for arrived in (110.0, 160.0):  # 20 s early, 30 s late against the start + warm-up
        clock = progress.Progress(4, 10.0, 2.0, start=100.0, estimated_start_s=20.0)
        clock.estimated_warmup_s = 10.0
        clock.batch_done(1, arrived)
        assert clock.left_s(arrived) == 4 * 10.0 + 2.0
        assert clock.left_s(arrived + 3.0) == 4 * 10.0 - 3.0 + 2.0
        assert clock.left_s(arrived + 99.0) == 2.0  # late: never below the end
    resumed = progress.Progress(10, 10.0, 2.0, start=100.0, estimated_start_s=20.0)
    resumed.batch_done(7, 110.0)  # resumed after step 6: its first batch is for step 7
    assert resumed.left_s(113.0) == 4 * 10.0 - 3.0 + 2.0
    before = progress.Progress(4, 10.0, 2.0, start=100.0, estimated_start_s=20.0)
    before.policy = replace(progress.PACE, first_batch_ends_start=False)
    before.batch_done(1, 110.0)
    assert before.left_s(110.0) == 10.0 + 4 * 10.0 + 10.0 + 2.0  # the estimated start, as was


def test_the_orchestrators_batches_show_the_pace_once_they_wait_for_a_policy():
    """An async run's first `async_level + 1` batches need no trained policy: they are written
    back to back, faster than any step, and give no interval."""
    clock = progress.Progress(max_steps=8, estimated_step_s=20.0, untrained_batches=2)
    clock.batch_done(1, 50.0)
    clock.batch_done(2, 52.0)  # generated at once from the base policy: no pace
    assert clock.intervals() == []
    for done, at in ((3, 60.0), (4, 65.0), (5, 70.0)):
        clock.batch_done(done, at)
    assert clock.intervals() == [8.0, 5.0, 5.0]
    assert clock.pace_s() == pytest.approx(5.0)
    clock.step_done(1, 62.0)
    assert clock.left_s(62.0) == pytest.approx(7 * 5.0)
    unknown = progress.Progress(max_steps=8, estimated_step_s=20.0)  # every batch counts
    unknown.batch_done(1, 50.0)
    unknown.batch_done(2, 52.0)
    assert unknown.intervals() == [2.0]


def test_the_time_left_without_an_estimate_is_measured_only():
    clock = progress.Progress(max_steps=4, estimated_step_s=None)
    assert clock.left_s(0.0) is None
    clock.step_done(2, 10.0)
    clock.step_done(3, 13.0)
    assert clock.left_s(13.0) == pytest.approx(3.0)


def test_status_words_from_a_run_json_and_its_records():
    state = {
        "estimate": {"step_s": 2.0, "end_s": 1.0, "wall_s": 30.0},
        "progress": {"max_steps": 4},
    }
    records = [{"component": "trainer", "step": s, "time": 1000.0 + 2 * s} for s in (1, 2, 3)]
    records.append({"component": "trainer", "step": "x", "time": "damaged"})
    records.append({"component": "trainer", "step": 3, "time": float("nan")})
    line = progress.status_line(state, records, now=1006.0)
    # two intervals of 2 s: a step and the end left
    assert line.startswith("~3 s (expected to finish at")
    state["measured"] = {"wall_s": 33.0}
    state["estimate_accuracy"] = {"wall": 1.1, "disk": 0.95}
    assert progress.status_line(state, records, 2000.0) == (
        "estimated 30 s, took 33 s (1.10x); disk 0.95x"  # ratios as they are kept
    )
    assert progress.status_line({}, records, 0.0) is None


def test_accuracy_is_measured_over_estimated():
    estimate = {
        "wall_s": 100.0,
        "step_s": 4.0,
        "disk_bytes": {"a": 50, "b": 50},
        "memory_bytes": {"trainer": 200, "inference": 0},
    }
    measured = {
        "wall_s": 110.0,
        "step_s": 4.0,
        "disk_bytes": 90,
        "peak_memory_bytes": {"trainer": 150},
    }
    assert progress.accuracy(estimate, measured) == {
        "wall": 1.1,
        "step": 1.0,
        "disk": 0.9,
        "memory trainer": 0.75,
    }


@pytest.mark.parametrize(
    "seconds, words",
    [(None, "?"), (0, "0 s"), (42.4, "42 s"), (250, "4 min 10 s"), (3900, "1 h 05 min")],
)
def test_durations_read_as_words(seconds, words):
    assert progress.duration(seconds) == words


def test_the_range_runs_from_short_answers_to_full_ones():
    job = Job(max_steps=10, rollouts=8, answer_tokens=100, trainer_peak=1.0)
    result = model.estimate(job, SMALL, FLAT)
    short = model.wall_with_answers(job, SMALL, FLAT, 1.0, model.SHORT_ANSWERS)
    full = model.wall_with_answers(job, SMALL, FLAT, 1.0, 1.0)
    assert short < result.wall_s < full
    assert result.wall_range == pytest.approx(
        (model.WALL_RANGE[0] * short, model.WALL_RANGE[1] * full)
    )
