"""Deterministic runs, the orchestrator's side: per-rollout seeds, the exact policy lag and the
checkpoints that carry the batches generated before them."""

import asyncio
import math
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator import ckpt
from orchestrator.config import OrchestratorConfig
from orchestrator.policy import Policy
from orchestrator.pooled_client import PooledClient
from orchestrator.rollouts import batch_digests
from orchestrator.seeds import SEED_BITS, rollout_seeds, turn_seed
from orchestrator.servers import ServerPool
from rlcore.contracts.protocol import Batch, Sample, read_batch
from rlcore.runs.rundir import RunDir


def test_rollout_seeds_are_a_pure_function_of_their_parts():
    seeds = rollout_seeds(0, 3, 12, 8)
    assert seeds == rollout_seeds(0, 3, 12, 8)
    assert len(set(seeds)) == 8 and all(0 <= s < 2**SEED_BITS for s in seeds)
    others = rollout_seeds(1, 3, 12, 8) + rollout_seeds(0, 4, 12, 8) + rollout_seeds(0, 3, 13, 8)
    assert not set(seeds) & set(others)


def test_turn_seeds_keep_turn_zero_and_differ_after():
    assert turn_seed(5, 0) == 5
    assert len({turn_seed(5, t) for t in range(4)}) == 4


def test_the_client_mixes_the_turn_into_a_seeded_request():
    seen = []

    async def fake_response(prompt, model, sampling_args, tools=None, **kwargs):
        seen.append(sampling_args.get("seed"))

    async def cap(model, prompt, sampling_args, tools):
        return sampling_args

    client = PooledClient.__new__(PooledClient)
    client.semaphore = asyncio.Semaphore(1)
    client.budget = SimpleNamespace(cap=cap)
    client.pool = ServerPool(["http://a/v1"])
    client.subs = [SimpleNamespace(get_native_response=fake_response)]
    for turns in (0, 2):
        state = {"trajectory": [None] * turns}
        asyncio.run(client.get_native_response([], "m", {"seed": 7}, state=state))
    asyncio.run(client.get_native_response([], "m", {}, state={"trajectory": [None]}))
    assert seen == [7, turn_seed(7, 2), None]


def test_checkpoint_plan_without_lead_is_the_usual_rule():
    plan = ckpt.CheckpointPlan(interval=2, max_steps=5, enabled=True)
    assert [plan.due(n) for n in range(6)] == [[], [], [2], [], [4], [5]]
    assert all(plan.carriers(b) == [] for b in range(5))


def test_checkpoint_plan_with_lead_waits_for_the_batches_it_carries():
    plan = ckpt.CheckpointPlan(interval=2, max_steps=5, enabled=True, lead=1)
    # checkpoint 2 is written once batch 2 exists (3 batches written) and carries batch 2
    assert [plan.due(n) for n in range(6)] == [[], [], [], [2], [], [4, 5]]
    assert {b: plan.carriers(b) for b in range(5)} == {0: [], 1: [], 2: [2], 3: [], 4: [4]}
    lead2 = ckpt.CheckpointPlan(interval=1, max_steps=4, enabled=True, lead=2)
    assert lead2.carriers(2) == [1, 2] and lead2.due(3) == [1] and lead2.due(4) == [2, 3, 4]


def test_kept_batches_come_back_on_resume(tmp_path):
    run_dir = RunDir(tmp_path)
    plan = ckpt.CheckpointPlan(interval=1, max_steps=4, enabled=True, lead=1)
    sample = Sample([1, 2], [3], [1], [-0.5], advantage=1.0, reward=1.0)
    ckpt.keep_batch(run_dir, plan, Batch(step=2, temperature=1.0, samples=[sample]), {})
    assert ckpt.restore_batches(run_dir, 2) == [2]
    assert read_batch(run_dir.rollout_dir(2)).samples[0].completion_ids == [3]


class FakeReceiver:
    eager = True

    def __init__(self, offered):
        self.offered, self.waited = offered, []

    def newest(self):
        return self.offered

    async def wait(self, oldest, newest, timeout_s):
        self.waited.append((oldest, newest))
        return newest

    async def swap(self, step, servers):
        servers.append(step)
        return {"status": "ok"}


@pytest.mark.parametrize("async_level", [0, 1, 2])
def test_a_deterministic_run_serves_exactly_step_minus_async_level(async_level):
    served = []
    config = OrchestratorConfig(deterministic=True, async_level=async_level)
    policy = Policy(config, FakeReceiver(offered=5), served, step=0)
    for step in range(5):
        asyncio.run(policy.ensure(step))
        assert policy.step == max(0, step - async_level)
    assert served == sorted(set(served))  # each policy swapped in once
    if async_level:  # the default mode takes the newest offered policy instead
        config = OrchestratorConfig(async_level=async_level)
        default = Policy(config, FakeReceiver(offered=5), [], step=0)
        asyncio.run(default.ensure(1))
        assert default.step == 5


def test_deterministic_eval_with_lag_needs_the_filesystem_transport():
    with pytest.raises(ValueError, match="weight-transfer.type filesystem"):
        OrchestratorConfig(
            deterministic=True,
            async_level=1,
            eval={"env": []},
            weight_transfer={"type": "collective"},
        )


def test_every_rollout_state_carries_its_own_seeded_rng():
    from openai import AsyncOpenAI
    from verifiers.clients import OpenAIChatCompletionsClient

    from orchestrator.envs.classic import VerifiersEnv

    env = VerifiersEnv("rl-guess-number", {}).env
    client = OpenAIChatCompletionsClient(AsyncOpenAI(base_url="http://127.0.0.1:9", api_key="-"))
    example = env.get_dataset().to_list()[0]
    inputs = {k: example[k] for k in ("prompt", "answer", "example_id") if k in example}

    def draws(sampling: dict) -> list[int]:
        state = asyncio.run(env.init_state(inputs, client, "m", sampling))
        return [state["rng"].randint(0, 10**9) for _ in range(3)]

    assert draws({"seed": 11}) == draws({"seed": 11})
    assert draws({"seed": 11}) != draws({"seed": 12})
    assert draws({}) != draws({})  # no seed: a fresh stream every rollout


samples_strategy = st.lists(
    st.tuples(
        st.lists(st.integers(0, 2**17), min_size=1, max_size=6),
        st.lists(
            st.tuples(st.integers(0, 2**17), st.booleans(), st.floats(-30, 0)),
            min_size=1,
            max_size=6,
        ),
    ),
    min_size=1,
    max_size=4,
)


def as_samples(drawn) -> list[Sample]:
    return [
        Sample(
            prompt,
            [t for t, _, _ in done],
            [int(m) for _, m, _ in done],
            [lp if m else 0.0 for _, m, lp in done],
            advantage=0.0,
        )
        for prompt, done in drawn
    ]


@given(samples_strategy, st.data())
def test_batch_digests_tell_a_changed_token_from_a_changed_logprob(drawn, data):
    """The digests a deterministic run logs: a pure function of the batch; one logprob moved by
    one ulp changes only the logprobs digest; one token, or where the prompt ends, only the
    tokens digest."""
    digests = batch_digests(as_samples(drawn))
    assert digests == batch_digests(as_samples(drawn))
    i = data.draw(st.integers(0, len(drawn) - 1))
    samples = as_samples(drawn)
    samples[i].completion_logprobs[0] = math.nextafter(samples[i].completion_logprobs[0], 1.0)
    changed = batch_digests(samples)
    assert changed["tokens_digest"] == digests["tokens_digest"]
    assert changed["logprobs_digest"] != digests["logprobs_digest"]
    samples = as_samples(drawn)
    samples[i].completion_ids[0] += 1
    changed = batch_digests(samples)
    assert changed["tokens_digest"] != digests["tokens_digest"]
    assert changed["logprobs_digest"] == digests["logprobs_digest"]
    samples = as_samples(drawn)
    first, *rest = samples[i].completion_ids
    samples[i].prompt_ids.append(first)
    samples[i].completion_ids, samples[i].completion_mask = rest, samples[i].completion_mask[1:]
    samples[i].completion_logprobs = samples[i].completion_logprobs[1:]
    assert batch_digests(samples)["tokens_digest"] != digests["tokens_digest"]
