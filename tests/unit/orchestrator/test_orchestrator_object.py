"""The Orchestrator object end to end without a server: fake environments and swaps, real
batches, checkpoints and metrics on disk; every batch from the policy its step needs."""

import asyncio
import json
from types import SimpleNamespace

from orchestrator import ckpt
from orchestrator.archive import Archive
from orchestrator.config import OrchestratorConfig, SamplesConfig
from orchestrator.envs import Rollout, Turn
from orchestrator.envs.budget import TokenBudget
from orchestrator.evals.summary import env_summary, read_summary
from orchestrator.loop import Orchestrator
from orchestrator.policy import Policy
from orchestrator.sampler import ExampleSampler
from orchestrator.servers import ServerPool
from rlcore.contracts import samples_store
from rlcore.contracts.protocol import read_batch
from rlcore.runs.rundir import RunDir, steps_in


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
        output_dir=tmp_path,
        max_steps=4,
        async_level=1,
        batch_size=4,
        rollouts_per_example=2,
        env=[{"id": "count"}],
        ckpt={"interval": 2},
        deterministic=True,
    )
    run_dir, env, logged = RunDir(tmp_path), CountingEnv(), []
    pool = ServerPool(["http://a/v1"])
    pool.swapped = []
    client = SimpleNamespace(pool=pool, budget=TokenBudget(pool.tokenize, config.seq_len))
    monitor = SimpleNamespace(log=lambda step, metrics: logged.append((step, metrics)))
    state = ckpt.OrchestratorState(env_ids=["count"])
    plan = ckpt.CheckpointPlan(2, 4, True, lead=1)
    sampler = ExampleSampler([4], [1.0], 0, state.sampler)
    policy = Policy(config, Receiver(), pool, step=0)
    archive = Archive(config.samples, run_dir.samples, config.model.name)
    archive.tokenizer_tried = True  # the default model's tokenizer is not this test's business
    orchestrator = Orchestrator(
        config, run_dir, [env], [], state, sampler, plan, client, monitor, policy, archive
    )
    asyncio.run(orchestrator.run())
    archive.close()
    assert pool.swapped == [1, 2]  # batch n from policy n - 1 exactly, each swapped in once
    base = config.model.name
    assert env.models == [base] * 4 + ["step_1"] * 2 + ["step_2"] * 2  # two groups a batch
    assert [(step, m["policy_step"]) for step, m in logged] == [(0, 0), (1, 0), (2, 1), (3, 2)]
    for step in range(4):
        batch = read_batch(run_dir.rollout_dir(step))
        assert batch.step == step and len(batch.samples) == 4
    assert state.step == 4 and ckpt.load(run_dir, 2).step == 3  # written once batch 2 was
    assert (run_dir.part_dir(2, ckpt.PART) / "rollouts" / "step_2").is_dir()  # carried
    assert samples_store.list_steps(run_dir.samples) == [0, 1, 2, 3]  # the archive: every step
    for step, policy_step in [(0, 0), (1, 0), (2, 1), (3, 2)]:
        rows = samples_store.read_step(samples_store.step_file(run_dir.samples, step)).to_pylist()
        assert [(r["group"], r["member"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert {(r["step"], r["policy_step"], r["env"]) for r in rows} == {
            (step, policy_step, "count")
        }
        assert [r["advantage"] for r in rows] == [-0.5, 0.5, -0.5, 0.5] and all(
            r["kept"] for r in rows
        )


class EvalEnv(CountingEnv):
    id = "count-eval"

    def eval_examples(self, num_examples):
        return [{"index": i} for i in range(num_examples)]


def test_in_run_evals_keep_their_samples_as_the_evals_command_writes_them(tmp_path):
    config = OrchestratorConfig(
        output_dir=tmp_path,
        max_steps=3,
        async_level=0,
        batch_size=2,
        rollouts_per_example=2,
        env=[{"id": "count"}],
        ckpt={"enabled": False},
        eval={
            "interval": 2,
            "env": [{"id": "count-eval", "num_examples": 3, "rollouts_per_example": 2}],
        },
    )
    run_dir, logged = RunDir(tmp_path), []
    pool = ServerPool(["http://a/v1"])
    pool.swapped = []
    client = SimpleNamespace(pool=pool, budget=TokenBudget(pool.tokenize, config.seq_len))
    monitor = SimpleNamespace(log=lambda step, metrics: logged.append((step, metrics)))
    state = ckpt.OrchestratorState(env_ids=["count"])
    sampler = ExampleSampler([4], [1.0], 0, state.sampler)
    archive = Archive(SamplesConfig(keep=False), run_dir.samples, config.model.name)
    orchestrator = Orchestrator(
        config,
        run_dir,
        [CountingEnv()],
        [EvalEnv()],
        state,
        sampler,
        ckpt.CheckpointPlan(None, 3, False),
        client,
        monitor,
        Policy(config, Receiver(), pool, step=0),
        archive,
    )
    asyncio.run(orchestrator.run())
    assert steps_in(run_dir.evals) == [0, 2, 3]  # the base model, every 2 steps, the last
    for step in (0, 2, 3):
        folder = run_dir.evals / f"step_{step}"
        rows = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
        assert [(r["env"], r["example"], r["rollout"], r["reward"]) for r in rows] == [
            ("count-eval", e, i, float(i)) for e in range(3) for i in range(2)
        ]
        assert read_summary(folder / "summary.json") == {"count-eval": env_summary(rows, 2, 1.0)}
        assert read_summary(folder / "summary.json")["count-eval"]["pass@2"] == 1.0
