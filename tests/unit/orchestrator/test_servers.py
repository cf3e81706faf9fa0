"""Spreading requests over several inference servers (orchestrator/servers.py), and weight
swaps that count only when every server took them."""

import asyncio
import json

import httpx
import pytest

from orchestrator.client import OrchestratorError
from orchestrator.config import OrchestratorConfig
from orchestrator.policy import Policy
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


# -- weight swaps and /tokenize through the pool's one HTTP client (in-process, no server) ------
def pool_answering(handler, urls=("http://a:1/v1", "http://b:2/v1"), read_token=lambda: "t"):
    """A pool whose HTTP client answers with `handler(request)` instead of the network."""
    return ServerPool(list(urls), 5.0, read_token, httpx.MockTransport(handler))


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"status": "ok"})


def test_a_swap_waits_for_every_server_and_sends_each_its_request():
    seen = []

    def handler(request):
        seen.append(
            (request.url.host, json.loads(request.content), request.headers["authorization"])
        )
        return ok(request)

    pool = pool_answering(handler)
    answer = asyncio.run(pool.update_weights([{"weight_dir": "/w/1"}, {"weight_dir": "/w/2"}]))
    assert answer == {"status": "ok"}
    assert sorted(seen) == [
        ("a", {"weight_dir": "/w/1"}, "Bearer t"),
        ("b", {"weight_dir": "/w/2"}, "Bearer t"),
    ]


def test_a_swap_the_second_server_refuses_is_an_error_naming_it():
    def handler(request):
        if request.url.host == "b":
            return httpx.Response(422, text="not a policy folder of this run")
        return ok(request)

    with pytest.raises(OrchestratorError, match=r"http://b:2/update_weights .* 422") as err:
        asyncio.run(pool_answering(handler).update_weights([{}, {}]))
    assert "http://a:1" not in str(err.value)


def test_a_swap_whose_connection_breaks_names_the_error_even_without_a_message():
    def reset(request):
        raise httpx.ReadError("")  # a connection reset says nothing more

    with pytest.raises(OrchestratorError, match=r"update_weights .* failed: ReadError"):
        asyncio.run(pool_answering(reset).update_weights([{}, {}]))


def test_idle_connections_are_dropped_before_vllm_closes_them():
    """vLLM's server closes an idle connection after VLLM_HTTP_TIMEOUT_KEEP_ALIVE seconds (read
    from its source, not imported): a pool keeping it as long could send a swap on a connection
    that is closing that moment."""
    import ast
    import importlib.util
    from pathlib import Path

    from orchestrator.servers import LIMITS

    spec = importlib.util.find_spec("vllm")
    source = Path(spec.origin).with_name("envs.py").read_text()
    (keep_alive,) = [
        ast.literal_eval(node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.AnnAssign)
        and getattr(node.target, "id", "") == "VLLM_HTTP_TIMEOUT_KEEP_ALIVE"
    ]
    assert LIMITS.keepalive_expiry < keep_alive


def test_servers_that_answer_a_swap_differently_are_an_error_naming_one():
    def no_route_on_b(request):
        return httpx.Response(404) if request.url.host == "b" else ok(request)

    with pytest.raises(OrchestratorError, match=r"http://b:2/v1 has no /update_weights route"):
        asyncio.run(pool_answering(no_route_on_b).update_weights([{}, {}]))

    def adapter_on_a(request):
        return httpx.Response(200, json={"model": "step_1"} if request.url.host == "a" else {})

    with pytest.raises(OrchestratorError, match=r"http://b:2/v1 serves the policy as None"):
        asyncio.run(pool_answering(adapter_on_a).update_weights([{}, {}]))

    def plain(request):
        return httpx.Response(404)

    assert asyncio.run(pool_answering(plain).update_weights([{}, {}])) is None


def test_the_admin_token_is_read_once_and_again_only_when_refused():
    reads, tokens = [], iter(["old", "new", "new"])

    def read_token():
        reads.append(1)
        return next(tokens)

    def handler(request):
        if request.headers["authorization"] != "Bearer new":
            return httpx.Response(401)
        return ok(request)

    pool = pool_answering(handler, urls=["http://a:1/v1"], read_token=read_token)

    async def swaps():
        for _ in range(3):
            await pool.update_weights([{}])

    asyncio.run(swaps())
    assert len(reads) == 2  # the first swap's stale token, then the new one, kept
    pool = pool_answering(handler, urls=["http://a:1/v1"], read_token=lambda: "wrong")
    with pytest.raises(OrchestratorError, match="admin_token"):
        asyncio.run(pool.update_weights([{}]))


def test_tokenize_is_spread_over_the_servers_like_generation():
    hosts = []

    def handler(request):
        hosts.append(request.url.host)
        assert request.url.path == "/tokenize"
        return httpx.Response(200, json={"count": 7, "tokens": []})

    pool = pool_answering(handler, urls=["http://a:1/v1", "http://b:2/v1", "http://c:3/v1"])

    async def counts():
        return [await pool.tokenize({"messages": []}) for _ in range(6)]

    assert asyncio.run(counts()) == [7] * 6
    assert sorted(hosts) == ["a", "a", "b", "b", "c", "c"]


def test_tokenize_moves_off_a_server_that_cannot_be_reached():
    def handler(request):
        if request.url.host == "a":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"count": 3})

    pool = pool_answering(handler)
    assert asyncio.run(pool.tokenize({})) == 3
    assert pool.pick(set()) == 1  # a is left out for a while


def test_a_collective_swap_gives_each_server_its_first_rank(tmp_path):
    from orchestrator.collective import CollectiveReceiver
    from rlcore.contracts import collective
    from rlcore.runs.rundir import RunDir

    run_dir = RunDir(tmp_path)
    run_dir.transfer.mkdir(parents=True)
    group = {"id": "g", "world_size": 5, "timeout_s": 1000.0}
    collective.write_offer(run_dir.transfer, 3, group, {"names": []})
    sent, waits = [], []

    class Servers(list):
        async def update_weights(self, requests, timeout_s=None):
            sent.extend(requests)
            waits.append(timeout_s)
            return {"status": "ok"}

    receiver = CollectiveReceiver(run_dir)
    assert asyncio.run(receiver.swap(3, Servers([0, 1]))) == {"status": "ok"}
    assert [r["rank_offset"] for r in sent] == [1, 3]  # 4 workers: 2 per server
    assert waits == [3 * 1000.0 + 120]  # the answer's wait grows with the group's timeout
    assert collective.read_request(run_dir.transfer, "g") == 3
    with pytest.raises(OrchestratorError, match="cannot be split evenly over 3"):
        asyncio.run(receiver.swap(3, Servers([0, 1, 2])))


def test_a_policy_served_by_plain_servers_stops_swapping():
    class Receiver:
        eager = False

        async def wait(self, oldest, newest, timeout_s):
            return newest

        async def swap(self, step, servers):
            servers.append(step)
            return None

    swaps = []
    policy = Policy(OrchestratorConfig(async_level=0), Receiver(), swaps, step=0)
    for step in (1, 2):
        asyncio.run(policy.ensure(step))
    assert (
        swaps == [1] and not policy.can_update and policy.served_model == policy.config.model.name
    )


# -- what the orchestrator records it waits on (rlcore.runs.waits), for rl's stall watch
# ------------
@pytest.fixture
def board(tmp_path, monkeypatch):
    """The orchestrator's recorded waits, as rl reads them: [(what, peer, server)] now."""
    from rlcore.runs import waits

    monkeypatch.setattr(waits, "_board", None)
    waits.setup(tmp_path, "orchestrator")
    yield lambda: sorted(
        (w["waiting_for"], w["peer"], w["server"])
        for w in waits.open_waits(waits.read(tmp_path, "orchestrator"))
    )
    monkeypatch.setattr(waits, "_board", None)


def test_requests_in_flight_are_a_recorded_wait_on_their_server(board):
    seen = []

    def handler(request):
        seen.append((request.url.host, board()))
        return httpx.Response(200, json={"count": 7})

    pool = pool_answering(handler)
    pool.servers[0].in_flight = 1  # busier: the request goes to the second server
    assert asyncio.run(pool.tokenize({"messages": []})) == 7
    assert seen == [("b", [("completions for the rollouts in flight", "inference", 1)])]
    assert board() == []


def test_a_swap_is_a_recorded_wait_on_each_server_until_it_answers(board):
    seen = []

    def handler(request):
        seen.append((request.url.host, board()))
        return ok(request)

    pool = pool_answering(handler)
    asyncio.run(pool.update_weights([{"step": 4}, {"step": 4}]))
    for host, found in seen:
        server = {"a": 0, "b": 1}[host]
        assert ("the swap to policy step 4", "inference", server) in found, seen
    assert board() == []
