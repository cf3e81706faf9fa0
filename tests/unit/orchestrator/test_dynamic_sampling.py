"""Dynamic sampling: groups whose rollouts all scored the same are left out and more are
generated, up to max_rounds; everything generated still counts for the step's reward."""

import asyncio

import pytest

from orchestrator.config import DynamicSamplingConfig, OrchestratorConfig
from orchestrator.dynamic import is_informative, sample_batch
from orchestrator.envs import Rollout
from orchestrator.envs.base import Turn
from orchestrator.loop import build_batch


def group(*rewards: float, error: str | None = None) -> list[Rollout]:
    turn = Turn(prompt_ids=[1, 2], completion_ids=[3, 4], completion_logprobs=[-0.1, -0.2])
    return [
        Rollout(example_id=0, prompt=[], completion=[], reward=r, turns=[turn], error=error)
        for r in rewards
    ]


class Rounds:
    """Hands out prepared groups round by round, recording how many each round asked for."""

    def __init__(self, *rounds: list[list[Rollout]]):
        self.rounds, self.asked = list(rounds), []

    async def __call__(self, num_groups: int):
        self.asked.append(num_groups)
        groups = self.rounds.pop(0)[:num_groups]
        return [(0, len(self.asked) * 10 + i) for i in range(len(groups))], groups


def run(num_groups, rounds: Rounds, **config):
    return asyncio.run(sample_batch(num_groups, rounds, DynamicSamplingConfig(**config)))


def test_uniform_groups_are_skipped_and_replaced():
    mixed, solved, failed = group(1, 0), group(1, 1), group(0, 0)
    rounds = Rounds([mixed, solved, failed, mixed], [solved, mixed], [mixed, mixed])
    sampled = run(4, rounds, enabled=True, max_rounds=4)
    assert rounds.asked == [4, 2, 1]  # as many as are missing
    assert len(sampled.kept) == 4 and all(is_informative(g) for g in sampled.kept)
    assert len(sampled.groups) == len(sampled.picks) == 7  # reward counts everything generated
    assert sampled.metrics() == {"num_skipped_groups": 3, "num_generation_rounds": 3}


def test_off_keeps_every_group_in_one_round():
    rounds = Rounds([group(1, 1), group(0, 1)])
    sampled = run(2, rounds)
    assert rounds.asked == [2] and len(sampled.kept) == 2
    assert sampled.metrics() == {"num_skipped_groups": 0, "num_generation_rounds": 1}


def test_rounds_are_bounded_and_a_batch_never_ends_empty():
    rounds = Rounds([group(1, 1)] * 2, [group(0, 0)] * 2)
    sampled = run(2, rounds, enabled=True, max_rounds=2)
    assert rounds.asked == [2, 2]
    assert sampled.kept == [group(0, 0)] * 2  # nothing informative: the last round trains
    assert sampled.metrics()["num_generation_rounds"] == 2


def test_failed_rollouts_do_not_make_a_group_informative():
    assert not is_informative(group(1, 1) + group(0, error="server died"))
    assert is_informative(group(1, 0, 1))


def test_kept_groups_build_a_batch_with_nonzero_advantages():
    config = OrchestratorConfig(batch_size=4, rollouts_per_example=2)
    rounds = Rounds([group(1, 1), group(1, 0)], [group(0, 1)])
    sampled = run(2, rounds, enabled=True)
    batch, _ = build_batch(config, 0, sampled.kept)
    assert sorted(s.advantage for s in batch.samples) == pytest.approx([-0.5, -0.5, 0.5, 0.5])


def test_max_rounds_must_be_positive():
    with pytest.raises(ValueError, match="max_rounds"):
        DynamicSamplingConfig(enabled=True, max_rounds=0)
