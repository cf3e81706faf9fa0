"""Orchestrator pieces that need no server: advantages, the sampler, samples from rollouts,
checkpoint state and the waits' timeouts."""

import asyncio
import time

import pytest

from orchestrator import ckpt
from orchestrator.advantage import compute_advantages
from orchestrator.client import OrchestratorError, server_root
from orchestrator.config import AdvantageConfig
from orchestrator.envs import Rollout, Turn
from orchestrator.rollouts import Stats, rollout_samples
from orchestrator.sampler import ExampleSampler, SamplerState
from orchestrator.servers import ServerPool
from orchestrator.weights import build_receiver
from rlcore.config.base import FilesystemTransferConfig
from rlcore.runs.attempt import ATTEMPT_ENV
from rlcore.runs.rundir import RunDir


# -- advantages ----------------------------------------------------------------------------------
@pytest.mark.parametrize("std_normalize", [False, True])
def test_advantages_sum_to_zero_per_group(std_normalize):
    rewards = [1.0, 0.0, 0.0, 0.5]
    adv = compute_advantages(rewards, AdvantageConfig(std_normalize=std_normalize))
    assert sum(adv) == pytest.approx(0.0, abs=1e-9)
    assert adv[0] > adv[3] > adv[1] == adv[2]
    if std_normalize:
        assert max(adv) == pytest.approx((1.0 - 0.375) / 0.414578, rel=1e-4)
    else:
        assert adv == pytest.approx([0.625, -0.375, -0.375, 0.125])


def test_equal_rewards_give_zero_advantages():
    assert compute_advantages([1.0, 1.0], AdvantageConfig(std_normalize=True)) == [0.0, 0.0]


# -- sampler -------------------------------------------------------------------------------------
def test_sampler_resumes_the_same_sequence():
    whole = ExampleSampler([5, 7], [1.0, 3.0], seed=3).take(40)
    first = ExampleSampler([5, 7], [1.0, 3.0], seed=3)
    head = first.take(17)
    saved = SamplerState(**vars(first.state))
    rest = ExampleSampler([5, 7], [1.0, 3.0], seed=3, state=saved).take(23)
    assert head + rest == whole


def test_sampler_mixes_by_weight_and_covers_each_epoch():
    picks = ExampleSampler([10, 10], [1.0, 3.0], seed=0).take(400)
    share = sum(env == 1 for env, _ in picks) / len(picks)
    assert 0.68 < share < 0.82
    env0 = [i for env, i in picks if env == 0]
    assert sorted(env0[:10]) == list(range(10))  # one epoch = every example once
    assert env0[:10] != env0[10:20]  # reshuffled per epoch
    assert ExampleSampler([10, 10], [1.0, 3.0], seed=1).take(20) != picks[:20]


# -- samples from rollouts -----------------------------------------------------------------------
def rollout(turns, reward=1.0, truncated=False):
    return Rollout(
        example_id=0, prompt=[], completion=[], reward=reward, turns=turns, is_truncated=truncated
    )


def test_multi_turn_rollout_is_one_sample_with_env_tokens_masked():
    t1 = Turn([1, 2, 3], [10, 11], [-0.1, -0.2])
    t2 = Turn([1, 2, 3, 10, 11, 50, 51], [12], [-0.3])
    [sample] = rollout_samples(rollout([t1, t2]), 0.5, 100, False, Stats())
    assert sample.prompt_ids == [1, 2, 3]
    assert sample.completion_ids == [10, 11, 50, 51, 12]
    assert sample.completion_mask == [1, 1, 0, 0, 1]
    assert sample.completion_logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3]
    assert (sample.advantage, sample.loss_weight) == (0.5, 1.0)


def test_retokenized_history_splits_into_one_sample_per_turn():
    t1 = Turn([1, 2, 3], [10, 11], [-0.1, -0.2])
    t2 = Turn([1, 2, 3, 99, 50], [12], [-0.3])  # the server re-tokenized [10, 11] as [99]
    stats = Stats()
    samples = rollout_samples(rollout([t1, t2]), -1.0, 100, False, stats)
    assert [(s.prompt_ids, s.completion_ids) for s in samples] == [
        ([1, 2, 3], [10, 11]),
        ([1, 2, 3, 99, 50], [12]),
    ]
    assert all(s.completion_mask == [1] * len(s.completion_ids) for s in samples)
    assert stats.num_split == 1


@pytest.mark.parametrize("mask_truncated", [False, True])
def test_seq_len_cuts_the_completion_and_marks_it_truncated(mask_truncated):
    t1 = Turn([1, 2, 3], [10, 11, 12, 13], [-0.1] * 4)
    stats = Stats()
    [sample] = rollout_samples(rollout([t1]), 0.0, 5, mask_truncated, stats)
    assert sample.completion_ids == [10, 11]
    assert sample.loss_weight == (0.0 if mask_truncated else 1.0)
    assert stats.num_truncated == 1


def test_max_tokens_truncation_and_tokenless_rollouts():
    stats = Stats()
    [sample] = rollout_samples(rollout([Turn([1], [2], [-1.0], True)]), 0.0, 9, True, stats)
    assert sample.loss_weight == 0.0
    assert rollout_samples(rollout([]), 0.0, 9, True, stats) == []
    assert stats.num_dropped == 1


# -- checkpoints ---------------------------------------------------------------------------------
def test_checkpoint_round_trip(tmp_path):
    run_dir = RunDir(tmp_path)
    state = ckpt.OrchestratorState(
        step=4, sampler=SamplerState(9, [4, 5]), env_ids=["a"], num_tokens=7, wandb_run_id="x"
    )
    assert not ckpt.save(run_dir, state)  # the trainer's part is missing
    (run_dir.checkpoint_dir(4) / "trainer").mkdir()
    (run_dir.checkpoint_dir(4) / "trainer" / "DONE").write_text("")
    assert ckpt.save(run_dir, state) and run_dir.latest_checkpoint() == 4
    assert ckpt.load(run_dir, 4) == state


# -- waits end with a message, not a hang --------------------------------------------------------
def test_unreachable_server_times_out_naming_the_url():
    start = time.monotonic()
    with pytest.raises(OrchestratorError, match=r"http://127\.0\.0\.1:9/v1|127\.0\.0\.1:9"):
        asyncio.run(ServerPool(["http://127.0.0.1:9/v1"]).wait_ready("m", 1.5))
    assert time.monotonic() - start < 5
    assert server_root("http://h:1/v1/") == "http://h:1"


def test_missing_weights_time_out_naming_the_path(tmp_path):
    run_dir = RunDir(tmp_path)
    receiver = build_receiver(FilesystemTransferConfig(), run_dir, trusted_upto=0)
    with pytest.raises(OrchestratorError, match=r"weights/step_3/STABLE"):
        asyncio.run(receiver.wait(3, 4, 0.5))
    for step in (3, 4):
        run_dir.weight_dir(step).mkdir(parents=True)
        run_dir.mark_weights_stable(step)
    assert asyncio.run(receiver.wait(3, 4, 0.5)) == 4
    assert receiver.load_request(4) == {"weight_dir": str(run_dir.weight_dir(4).resolve())}


def test_weights_of_an_abandoned_attempt_are_not_used(tmp_path, monkeypatch):
    run_dir = RunDir(tmp_path)
    monkeypatch.setenv(ATTEMPT_ENV, "abandoned")
    for step in (2, 3):
        run_dir.weight_dir(step).mkdir(parents=True)
        run_dir.mark_weights_stable(step)
    monkeypatch.setenv(ATTEMPT_ENV, "this-attempt")
    receiver = build_receiver(FilesystemTransferConfig(), run_dir, trusted_upto=2)
    assert receiver.ready(2) and not receiver.ready(3)
    assert asyncio.run(receiver.wait(2, 3, 0.3)) == 2


# -- W&B keys come from .env and never override the environment -----------------------------------
def test_dotenv_sets_missing_keys_only(tmp_path, monkeypatch):
    from rlcore.reporting.metrics import step_line
    from rlcore.reporting.wandb_run import load_dotenv

    (tmp_path / ".env").write_text("# keys\nexport WANDB_API_KEY='abc'\nWANDB_ENTITY=me\n")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_ENTITY", "kept")
    load_dotenv(tmp_path / ".env")
    import os

    assert os.environ["WANDB_API_KEY"] == "abc" and os.environ["WANDB_ENTITY"] == "kept"
    assert step_line(12, 13.04, 0.116, 59700, 150) == (
        "Step 12 | Time: 13.04s | Reward: 0.1160 | Throughput: 4578.2 tokens/s | "
        "Seq. Length: 398.0 tokens/sample"
    )


def test_a_batch_without_tokens_ends_the_run():
    from orchestrator.config import OrchestratorConfig
    from orchestrator.loop import build_batch, check_errors

    failed = Rollout(example_id=0, prompt=[], completion=[], reward=0.0, error="connect refused")
    ok = rollout([Turn([1], [2], [-1.0])], reward=1.0)
    batch, stats = build_batch(OrchestratorConfig(), 3, [[failed, ok]])
    assert len(batch.samples) == 1 and batch.samples[0].advantage == 0.0
    assert stats.num_dropped == 1
    check_errors(3, [failed, ok], batch)  # only warns
    empty, _ = build_batch(OrchestratorConfig(), 3, [[failed]])
    with pytest.raises(OrchestratorError, match="step 3: no rollout .* connect refused"):
        check_errors(3, [failed], empty)


def test_a_rollout_without_a_model_turn_is_a_counted_error_with_its_reason():
    from orchestrator.config import OrchestratorConfig
    from orchestrator.loop import EMPTY_ROLLOUT, build_batch, first_error, mark_empty
    from rlcore.reporting.metrics import record_step_line

    silent = Rollout(example_id=0, prompt=[], completion=[], reward=0.0)  # no turn, no error
    ok = rollout([Turn([1], [2], [-1.0])], reward=1.0)
    groups = [[silent, ok]]
    mark_empty(groups)
    assert silent.error == EMPTY_ROLLOUT and ok.error is None
    assert "max_model_len" in EMPTY_ROLLOUT
    batch, stats = build_batch(OrchestratorConfig(), 0, groups)
    assert len(batch.samples) == 1 and stats.num_dropped == 1
    assert first_error([silent, ok]) == {"first_error": EMPTY_ROLLOUT}
    line = record_step_line({"step": 0, "reward": 1.0, "num_samples": 1, "num_errors": 1})
    assert line.endswith("| Errors: 1 rollouts")


def test_verifiers_output_becomes_a_rollout():
    from orchestrator.envs.classic import _to_rollout

    step = {
        "tokens": {"prompt_ids": [1, 2], "completion_ids": [3], "completion_logprobs": [-0.5]},
        "is_truncated": True,
    }
    output = {
        "example_id": 7,
        "prompt": [],
        "completion": [],
        "reward": 0.5,
        "metrics": {"f": 1},
        "trajectory": [step],
        "error": {"message": "boom"},
    }
    got = _to_rollout(output)
    assert got.turns == [Turn([1, 2], [3], [-0.5], True)]
    assert (got.example_id, got.reward, got.metrics, got.error) == (7, 0.5, {"f": 1.0}, "boom")
    with pytest.raises(OrchestratorError, match="return_token_ids"):
        _to_rollout({**output, "trajectory": [{"tokens": None}]})


def test_truncated_answers_score_zero():
    from orchestrator.loop import zero_truncated

    whole = rollout([Turn([1], [2, 3], [-0.1, -0.2])])
    cut_by_engine = rollout([Turn([1], [2, 3], [-0.1, -0.2], True)])
    cut_flagged = rollout([Turn([1], [2], [-0.1])], truncated=True)
    zero_truncated([[whole, cut_by_engine], [cut_flagged]])
    assert [whole.reward, cut_by_engine.reward, cut_flagged.reward] == [1.0, 0.0, 0.0]


def test_one_wandb_run_holds_orchestrator_and_relayed_trainer_metrics(tmp_path, fake_wandb):
    from orchestrator.config import OrchestratorConfig
    from orchestrator.monitor import Monitor

    run_dir = RunDir(tmp_path)
    config = OrchestratorConfig(output_dir=tmp_path, wandb={"project": "p", "offline": True})
    monitor = Monitor(config, run_dir, wandb_run_id=None)
    run_dir.append_metrics("trainer", 1, {"loss": 0.5})
    monitor.log(0, {"reward": 0.25})
    run_dir.append_metrics("trainer", 2, {"loss": 0.4})
    monitor.close(final_trainer_step=2, timeout_s=5)
    assert len(fake_wandb.inits) == 1 and fake_wandb.finished == 1
    logged = [data for _, data in fake_wandb.logged]
    assert logged[0] == {"orchestrator/reward": 0.25, "orchestrator/step": 0}
    relayed = [{k: v for k, v in d.items() if k != "trainer/rss_mib"} for d in logged[1:]]
    assert relayed == [
        {"trainer/loss": 0.5, "trainer/step": 1},
        {"trainer/loss": 0.4, "trainer/step": 2},
    ]
    assert all(d["trainer/rss_mib"] > 0 for d in logged[1:])  # metrics records carry it
    # resumed: the same W&B run continues
    Monitor(config, run_dir, wandb_run_id="run-123").close()
    assert fake_wandb.inits[1]["id"] == "run-123" and fake_wandb.inits[1]["resume"] == "allow"


def test_failed_rollouts_are_dropped_not_trained_with_reward_zero():
    from orchestrator.config import OrchestratorConfig
    from orchestrator.loop import build_batch

    config = OrchestratorConfig(batch_size=4, rollouts_per_example=4)
    ok = [rollout([Turn([1], [2], [-0.1])], reward=r) for r in (1.0, 0.0, 1.0)]
    failed = rollout([Turn([1], [3], [-0.2])], reward=0.0)
    failed.error = "environment raised: boom"
    batch, stats = build_batch(config, 0, [[*ok, failed]])
    assert len(batch.samples) == 3 and stats.num_dropped == 1
    assert sorted(round(s.advantage, 3) for s in batch.samples) == [-0.667, 0.333, 0.333]
