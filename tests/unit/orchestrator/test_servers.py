"""Spreading requests over several inference servers (orchestrator/servers.py)."""

from orchestrator.config import OrchestratorConfig
from orchestrator.servers import ServerPool


def test_requests_go_to_the_least_loaded_server_that_is_up():
    pool = ServerPool(["http://a/v1", "http://b/v1", "http://c/v1"])
    pool.servers[0].in_flight, pool.servers[1].in_flight, pool.servers[2].in_flight = 2, 1, 1
    pool.servers[1].served = 5
    assert pool.pick(set()) == 2  # b and c tie on load; c has served fewer
    pool.mark_down(2, ConnectionError("refused"))
    assert pool.pick(set()) == 1
    assert pool.pick({1}) == 0  # a request that failed on b moves on
    assert pool.pick({0, 1}) == 2  # a server that is down still beats none
    assert pool.pick({0, 1, 2}) is None


def test_per_server_counts_are_reported_per_step_with_several_servers():
    pool = ServerPool(["http://a/v1", "http://b/v1"])
    pool.servers[0].served, pool.servers[1].served = 3, 5
    assert pool.take_counts() == {"requests/server_0": 3, "requests/server_1": 5}
    pool.servers[1].served += 2
    assert pool.take_counts() == {"requests/server_0": 0, "requests/server_1": 2}
    assert ServerPool(["http://a/v1"]).take_counts() == {}


def test_base_url_takes_one_url_or_a_list():
    client = OrchestratorConfig().client
    assert client.base_urls == ["http://127.0.0.1:8000/v1"]
    urls = ["http://h1:8000/v1", "http://h2:8000/v1"]
    assert OrchestratorConfig(client={"base_url": urls}).client.base_urls == urls
