"""The inference port rule on a real SLURM cluster of three nodes (tests/integration/
slurm_nodes.py: one network namespace per node, so each node has its own ports): a job that
leaves `inference.server.port` unset takes, on its inference node, 8000 when it is free there,
else the next free port; here a stranger listens on node1's 8000 (inside node1's namespace
only), so the server listens on node1:8001 and the orchestrator is told so, while rl.toml keeps
the port unset for the next job. A given port is served as given. Skipped, saying why, where
the cluster cannot start."""

import subprocess
import sys
import time
import tomllib

import pytest

from tests.integration.helpers import tiny_rl_toml
from tests.integration.slurm_nodes import MultiNodeCluster, serving, wait_for_job
from tests.integration.test_slurm_three_nodes import job_log, submit

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LISTEN = "import socket, time\ns = socket.socket()\ns.bind(('', 8000))\ns.listen()\nprint('up', flush=True)\ntime.sleep(3600)\n"  # noqa: E501


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = MultiNodeCluster(tmp_path_factory.mktemp("slurm_nodes"), num_nodes=3)
    reason = nodes.start()
    if reason is not None:
        pytest.skip(f"the real 3-node SLURM cluster cannot start here ({reason})")
    with serving(nodes):
        yield nodes
    assert not nodes.leftovers(), f"left behind: {nodes.leftovers()}"


@pytest.mark.timeout(1800)
@pytest.mark.parametrize(("given", "served"), [(None, 8001), (8100, 8100)], ids=["unset", "given"])
def test_the_inference_port_on_the_inference_node(cluster, tiny_model_dir, tmp_path, given, served):
    """Unset: 8000 is taken on node1, so 8001; given: exactly that port (the launcher, on
    node1 too, holds no reservation that would refuse its own server there)."""
    out, config = tmp_path / "run", tmp_path / "rl.toml"
    text = tiny_rl_toml(tiny_model_dir, out, given or 1, max_steps=2)
    if given is None:
        text = text.replace("[inference.server]\nport = 1\n", "")
    config.write_text(
        text + '[slurm]\nnodes = 3\ntrainer_nodes = 2\ngpus_per_node = 0\ntime = "00:30:00"\n'
    )
    netns = f"--net=/run/netns/{cluster.namespaces['node1']}"
    stranger = subprocess.Popen(
        ["nsenter", netns, sys.executable, "-c", LISTEN], stdout=subprocess.PIPE, text=True
    )
    try:
        assert stranger.stdout.readline().strip() == "up"
        started = time.monotonic()
        job_id = submit(config, out)
        wait_for_job(job_id)
        print(f"the job ran in {time.monotonic() - started:.0f} s")
    finally:
        stranger.kill()
        stranger.wait()
    assert "with exit code 0" in job_log(out, job_id), job_log(out, job_id)
    orchestrator = tomllib.loads((out / "configs" / "orchestrator.toml").read_text())
    assert orchestrator["client"]["base_url"] == [f"http://node1:{served}/v1"], job_log(out, job_id)
    assert f"Inference: http://node1:{served} (each on its node)" in job_log(out, job_id)
    kept = tomllib.loads((out / "configs" / "rl.toml").read_text())
    assert kept["inference"]["server"]["port"] == (given or "None")  # unset: chosen again
    assert f" at http://0.0.0.0:{served} (" in (out / "logs" / "inference.log").read_text()
