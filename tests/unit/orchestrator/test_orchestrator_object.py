"""The Orchestrator object end to end without a server: fake environments and swaps, real
batches, checkpoints and metrics on disk; every batch from the policy its step needs."""

import asyncio
from types import SimpleNamespace

from orchestrator import ckpt
from orchestrator.config import OrchestratorConfig
from orchestrator.envs import Rollout, Turn
from orchestrator.envs.budget import TokenBudget
from orchestrator.loop import Orchestrator
from orchestrator.policy import Policy
from orchestrator.sampler import ExampleSampler
from orchestrator.servers import ServerPool
from rlcore.protocol import read_batch
from rlcore.rundir import RunDir


class CountingEnv:
    id = "count"
    num_examples = 4

    def __init__(self):
        self.models = []

    def example(self, index):
        return {"index": index}

    async def run_group(self, example, num_rollouts, client, model, sampling, seeds=None):
        self.models.append(model)
        return [
            Rollout(example["index"], "p", "c", reward=float(i), turns=[Turn([1, 2], [3], [-0.5])])
            for i in range(num_rollouts)
        ]

    async def close(self):
        pass


class Receiver:
    eager = False

    async def wait(self, oldest, newest, timeout_s):
        return newest

    async def swap(self, step, servers):
        servers.swapped.append(step)
        return {"status": "ok", "model": f"step_{step}"}

    def close(self):
        pass


def test_an_orchestrator_writes_every_batch_from_the_policy_it_needs(tmp_path):
    config = OrchestratorConfig(
        output_dir=tmp_path, max_steps=4, async_level=1, batch_size=4, rollouts_per_example=2,
        env=[{"id": "count"}], ckpt={"interval": 2}, deterministic=True,
    )  # fmt: skip
    run_dir, env, logged = RunDir(tmp_path), CountingEnv(), []
    pool = ServerPool(["http://a/v1"])
    pool.swapped = []
    client = SimpleNamespace(pool=pool, budget=TokenBudget(pool.tokenize, config.seq_len))
    monitor = SimpleNamespace(log=lambda step, metrics: logged.append((step, metrics)))
    state = ckpt.OrchestratorState(env_ids=["count"])
    plan = ckpt.CheckpointPlan(2, 4, True, lead=1)
    sampler = ExampleSampler([4], [1.0], 0, state.sampler)
    policy = Policy(config, Receiver(), pool, step=0)
    orchestrator = Orchestrator(
        config, run_dir, [env], [], state, sampler, plan, client, monitor, policy
    )
    asyncio.run(orchestrator.run())
    assert pool.swapped == [1, 2]  # batch n from policy n - 1 exactly, each swapped in once
    base = config.model.name
    assert env.models == [base] * 4 + ["step_1"] * 2 + ["step_2"] * 2  # two groups a batch
    assert [(step, m["policy_step"]) for step, m in logged] == [(0, 0), (1, 0), (2, 1), (3, 2)]
    for step in range(4):
        batch = read_batch(run_dir.rollout_dir(step))
        assert batch.step == step and len(batch.samples) == 4
    assert state.step == 4 and ckpt.load(run_dir, 2).step == 3  # written once batch 2 was
    assert (run_dir.part_dir(2, ckpt.PART) / "rollouts" / "step_2").is_dir()  # carried
