"""The start's disk check (launcher/preflight.py check_disk) against the run folder's fullest,
which the estimate's own disk figures give (launcher/prepare.py disk_need): real free space,
the tiny model's real shape."""

import shutil

import pytest

from launcher.plan import make_plan
from launcher.preflight import check_disk
from launcher.prepare import disk_need
from launcher.rl_config import RLConfig
from rlcore.errors import ConfigError


def plan_for(model, out, orchestrator=None, **trainer):
    spec = {"name": str(model), "dtype": "float32"}
    config = RLConfig.model_validate(
        {
            "output_dir": str(out),
            "trainer": {"model": spec, **trainer},
            "inference": {"model": dict(spec)},
            "orchestrator": orchestrator or {},
        }
    )
    plan = make_plan(config, [], dry_run=False, submitting=False)
    plan.disk_need = disk_need(plan)
    return plan


def test_a_run_that_would_fill_the_disk_is_refused_naming_the_fix(tmp_path, tiny_model_dir):
    free = shutil.disk_usage(tmp_path).free
    every = {"interval": 1}
    one, two = (plan_for(tiny_model_dir, tmp_path / "s", max_steps=n, ckpt=every) for n in (1, 2))
    per_step = two.disk_need - one.disk_need  # one more checkpoint kept, a step's archive, logs
    steps = int(free // per_step) + 10  # a checkpoint every step, all kept: more than is free
    plan = plan_for(tiny_model_dir, tmp_path / "big", max_steps=steps, ckpt=every)
    assert plan.disk_need > free
    with pytest.raises(ConfigError) as refused:
        check_disk(plan)
    words = str(refused.value)
    assert str(tmp_path / "big") in words and "--ckpt.keep" in words and "GiB is free" in words
    kept = plan_for(
        tiny_model_dir, tmp_path / "kept", max_steps=steps, ckpt={"interval": 1, "keep": 2}
    )
    check_disk(kept)  # keeping 2 fits
    assert kept.disk_need < plan.disk_need


def test_the_archive_counts_within_its_bound(tmp_path, tiny_model_dir):
    """A long run's archive is bounded (`samples.max_gib`; the oldest steps are deleted past
    it), so it never makes the check refuse a run that fits."""
    bounded = {"samples": {"max_gib": 0.001}}
    steps = 10**7
    plan = plan_for(tiny_model_dir, tmp_path / "r", max_steps=steps, orchestrator=bounded)
    free_of_archive = plan_for(
        tiny_model_dir, tmp_path / "r", max_steps=steps, orchestrator={"samples": {"keep": False}}
    )
    assert plan.disk_need - free_of_archive.disk_need == pytest.approx(0.001 * 2**30, rel=1e-6)


def test_an_unknown_model_shape_makes_no_disk_check(tmp_path):
    plan = plan_for("some-org/not-fetched", tmp_path / "run")
    assert plan.disk_need is None
    check_disk(plan)


def sft_estimate(keep):
    """The estimate of an `rl sft` run of the forecast tests' known small model, 60 steps, a
    checkpoint every 10, `keep` kept; FLAT speeds (the time is not the point here)."""
    from rlcore.forecast import model
    from tests.unit.forecast.known_speeds import FLAT, SMALL

    job = model.Job(
        max_steps=60,
        rollouts=32,
        answer_tokens=51,
        sft=True,
        trainer_peak=1.0,
        checkpoints_saved=6,
        checkpoints_kept=keep,
        policy_folders=1,
        archive=False,
    )
    return model.estimate(job, SMALL, FLAT), model.checkpoint_bytes(job, SMALL)


def test_rl_sft_refuses_a_run_the_free_space_cannot_hold_naming_the_fix(tmp_path):
    from launcher.sft_run import check_disk as check_sft_disk

    forecast, one = sft_estimate(keep=1)
    # at its fullest: the end's disk and one checkpoint more, written beside the newest kept
    assert forecast.disk_fullest == pytest.approx(forecast.disk_total + one)
    free = shutil.disk_usage(tmp_path).free
    check_sft_disk(tmp_path / "run", forecast)  # a few kB: fits this machine
    forecast.disk_fullest = free * 2.0
    with pytest.raises(ConfigError) as err:
        check_sft_disk(tmp_path / "new" / "run", forecast)  # the nearest existing folder's disk
    said = str(err.value)
    assert str(tmp_path / "new" / "run") in said and "--ckpt.keep" in said
    assert "--output-dir" in said
    check_sft_disk(tmp_path / "run", None)  # no estimate, no check
