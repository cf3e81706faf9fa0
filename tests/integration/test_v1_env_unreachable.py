"""A verifiers v1 taskset's real episodes (the interception server, the null harness's
subprocess) against a port where nothing listens."""

import pytest

from orchestrator.envs.v1 import V1Env

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_an_unreachable_server_costs_the_rollouts_not_the_run(tiny_model_dir):
    """Real episodes (interception server, the null harness's subprocess) against a port where
    nothing listens: each rollout ends with its error and no turns, and the env closes."""
    import asyncio

    from orchestrator.config import SamplingConfig
    from orchestrator.envs import sampling_args
    from orchestrator.pooled_client import PooledClient
    from orchestrator.servers import ServerPool
    from tests.integration.helpers import free_port

    pool = ServerPool([f"http://127.0.0.1:{free_port()}/v1"])
    client = PooledClient(pool, str(tiny_model_dir), seq_len=256, timeout_s=5, max_concurrent=4)
    env = V1Env("rl-add-digits-v1", {})
    sampling = sampling_args(SamplingConfig(max_tokens=4))

    async def run():
        try:
            return await env.run_group({"example_id": 0}, 2, client, str(tiny_model_dir), sampling)
        finally:
            await env.close()

    rollouts = asyncio.run(run())
    assert len(rollouts) == 2
    assert all(
        "Connection error" in r.error and not r.turns and r.reward == 0.0 for r in rollouts
    ), [r.error for r in rollouts]
    assert pool.servers[0].served == 2 and pool.servers[0].in_flight == 0
