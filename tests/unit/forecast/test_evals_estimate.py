"""The estimate of an evaluation (`evals`): its arithmetic against hand-computed values (the
server's start, each environment's rollouts one after the other, the stop, the server's memory,
the results' disk), the jobs read from an evals config, its block, and an estimate that cannot
be made saying why in one line, never raising."""

from dataclasses import replace

import pytest
from known_speeds import FLAT, SMALL

from orchestrator.evals.config import EvalsConfig
from orchestrator.evals.estimate import describe_evals, evals_forecast, evals_jobs
from rlcore.forecast import evals, model, report
from rlcore.forecast.model import GIB, Job
from rlcore.host.machine import probe

JOB = Job(
    max_steps=1,
    rollouts=6,
    rollouts_per_example=3,
    prompt_tokens=10,
    answer_tokens=8,
    answer_fill=1.0,
    kv_cache_bytes=GIB,
    archive=False,
)


def test_an_evaluation_adds_its_start_each_environment_and_its_stop_by_hand():
    jobs = {"a": JOB, "b": replace(JOB, rollouts=3, rollouts_per_example=1)}
    generate = {name: model.generate_s(job, SMALL, FLAT, 8.0) for name, job in jobs.items()}
    boot = evals.EVALS_START_IMPORTS * 1.0 + 1000 * 4 / 1e9 * 4  # imports, then the weights
    warmup = model.FIRST_STEP_EXTRA * generate["a"]  # one wave: all 6 of "a" run at once
    end = model.END_IMPORTS * 1.0
    result = evals.evals_estimate(jobs, SMALL, FLAT)
    assert result.phases == pytest.approx(generate)
    assert result.start_s == pytest.approx(boot + warmup) and result.end_s == pytest.approx(end)
    assert result.wall_s == pytest.approx(boot + warmup + generate["a"] + generate["b"] + end)
    assert result.wall_range[0] < result.wall_s < result.wall_range[1]
    slow = evals.evals_estimate(jobs, SMALL, FLAT, slowdown=2.0)  # CPU work stretched, not the stop
    assert slow.wall_s == pytest.approx(2 * (boot + warmup + sum(generate.values())) + end)


def test_the_warm_up_is_one_wave_of_the_first_environment():
    many = replace(JOB, rollouts=100, max_concurrent=32)
    wave = model.generate_s(replace(many, rollouts=32), SMALL, FLAT, 8.0)
    assert evals.warmup_s({"a": many}, SMALL, FLAT) == pytest.approx(wave)


def test_an_evaluations_memory_and_disk_by_hand():
    result = evals.evals_estimate({"a": JOB}, SMALL, FLAT)
    served = 1000 * 4 + 1000 * 4 + GIB + model.INFERENCE_BASE  # weights, packed copy, KV
    assert result.memory == pytest.approx({"inference": served, "evals": model.ORCHESTRATOR_BASE})
    assert result.machine_memory == pytest.approx(served + model.ORCHESTRATOR_BASE)
    line = (10 + 8) * evals.RESULT_BYTES_PER_TOKEN + evals.RESULT_BYTES_PER_ROLLOUT
    assert result.disk == pytest.approx(
        {"results": 6 * line, "configs and logs": evals.EVALS_FILES_BYTES}
    )
    gpu = evals.evals_estimate({"a": replace(JOB, on_gpu=True)}, SMALL, FLAT)
    assert gpu.memory["inference"] == evals.EVALS_HOST_ON_GPU  # the weights are on the GPU


def config(**extra) -> EvalsConfig:
    envs = [
        {"id": "rl-add-digits", "num_examples": 4, "rollouts_per_example": 3},
        {"id": "rl-add-digits", "num_examples": 2},
    ]
    fields = {"eval": {"env": envs}, "sampling": {"max_tokens": 8}, "seq_len": 256}
    return EvalsConfig.model_validate({**fields, **extra})


def test_each_environment_is_a_job_with_its_own_server_settings():
    settings = {"model": {"dtype": "float32"}, "cpu": {"kvcache_space_gib": 0.5}}
    jobs = evals_jobs(config(inference=settings), probe())
    assert list(jobs) == ["rl-add-digits#0", "rl-add-digits#1"]  # the results' labels
    first, second = jobs.values()
    assert (first.rollouts, first.rollouts_per_example, second.rollouts) == (12, 3, 2)
    assert first.answer_tokens == 8 and first.served_dtype == "float32"
    if not probe().num_gpus:
        assert first.kv_cache_bytes == 0.5 * GIB
        default = next(iter(evals_jobs(config(), probe()).values()))
        assert default.kv_cache_bytes == 4 * GIB  # inference's own default


def test_the_block_names_each_environment_and_the_basis():
    jobs = {"a": JOB}
    result = evals.evals_estimate(jobs, SMALL, FLAT)
    result.basis = ["model 0M parameters", "this machine: float32 1 GFLOP/s (cached)"]
    text = "\n".join(describe_evals(result, jobs, 24.0))
    assert text.startswith("Estimate (") and "  evaluate: ~" in text and "for 6 rollouts" in text
    assert ", a " in text and "  peak memory: inference " in text and "of 24 GiB" in text
    assert "  disk at the end: " in text and "  basis: this machine" in text


def test_an_evaluation_that_cannot_be_estimated_says_why_in_one_line(monkeypatch, tiny_model_dir):
    remote = config(client={"base_url": "http://127.0.0.1:9/v1"})
    assert evals_forecast(remote, str(tiny_model_dir)) == (
        None,
        [
            "Estimate: not made (client.base_url: the server runs elsewhere, its speed is not "
            "measured here)"
        ],
    )
    off = evals_forecast(config(), str(tiny_model_dir))  # RL_CALIBRATION=off in the unit tier
    assert off == (None, ["Estimate: not made (the speed measurement is off: RL_CALIBRATION=off)"])
    monkeypatch.setenv("RL_CALIBRATION", "on")
    monkeypatch.setattr(report, "speeds", lambda *a: FLAT)
    made, lines = evals_forecast(config(), str(tiny_model_dir))
    assert made is not None and made.speeds is FLAT and lines[0].startswith("Estimate (")
    assert "measured now in 0.0 s; cached once its server is ready" in "\n".join(lines)

    def broken(*args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(report, "speeds", broken)
    assert evals_forecast(config(), str(tiny_model_dir)) == (
        None,
        ["Estimate: not made (RuntimeError: a bug)"],
    )
