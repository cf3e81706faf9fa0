"""verifiers v1 tasksets through the environment seam: ids resolve to installed packages (or
verifiers' built-in tasksets) before anything starts, the bundled taskset loads with its args,
a v1 package behind the default `type` is detected, a trace branch becomes turns that extend
each other, and inference's generate route defaults to the text output mode."""

import json
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference.generate_compat import TextModeByDefault, with_text_mode
from orchestrator.envs import load_env
from orchestrator.envs.v1 import V1Env, branch_turns, env_config, is_v1_module
from rlcore.errors import ConfigError
from rlcore.host.environments import check_v1 as check_installed


def test_ids_resolve_to_packages_or_built_in_tasksets():
    check_installed(["rl-add-digits-v1", "textarena"], "env")
    with pytest.raises(ConfigError) as err:
        check_installed(["rl-add-digits-v1", "owner/no-such-taskset"], "eval.env")
    message = str(err.value)
    assert message.startswith("eval.env: verifiers v1 taskset not installed")
    assert "'owner/no-such-taskset' (module `no_such_taskset`)" in message
    assert "rl-add-digits-v1'" not in message


def test_args_split_between_taskset_and_agent():
    config = env_config("rl-add-digits-v1", {"seed": 3, "harness": "bash", "max_turns": 2})
    assert config["taskset"] == {"seed": 3, "id": "rl-add-digits-v1"}
    assert config["agent"] == {
        "harness": {"id": "bash"},
        "runtime": {"type": "subprocess"},
        "max_turns": 2,
    }
    assert env_config("x", {})["agent"]["harness"] == {"id": "null"}


def test_the_bundled_taskset_loads_with_its_args():
    train = V1Env("rl-add-digits-v1", {})
    assert train.num_examples == 80 and train.example(5) == {"example_id": 5}
    assert train.eval_examples(3) == [{"example_id": i} for i in range(3)]
    evaluation = V1Env("rl-add-digits-v1", {"split": "eval"})
    assert evaluation.num_examples == 20
    first = train.tasks[0].data
    assert first.prompt.startswith("What is ") and first.answer == sum(
        int(n) for n in first.prompt.removeprefix("What is ").split("?")[0].split(" + ")
    )
    assert V1Env("rl-add-digits-v1", {"seed": 1}).tasks[0].data != first


def test_bad_args_and_harnesses_are_config_errors():
    with pytest.raises(ConfigError, match="'rl-add-digits-v1' with args .*no_such_field"):
        V1Env("rl-add-digits-v1", {"no_such_field": 1})
    with pytest.raises(ConfigError, match="harness 'no-such-harness' not found"):
        V1Env("rl-add-digits-v1", {"harness": "no-such-harness"})


def test_a_v1_package_behind_the_default_type_loads_as_v1():
    assert is_v1_module("rl-add-digits-v1") and not is_v1_module("rl-add-digits")
    config = SimpleNamespace(type="verifiers", id="rl-add-digits-v1", args={})
    assert isinstance(load_env(config), V1Env)


def test_branch_tokens_become_turns_that_extend_each_other():
    # prompt (3) | sampled (2) | tool result (2) | sampled (3)
    ids = [1, 2, 3, 10, 11, 4, 5, 12, 13, 14]
    mask = [False] * 3 + [True] * 2 + [False] * 2 + [True] * 3
    logprobs = [0.0] * 3 + [-0.1, -0.2] + [0.0] * 2 + [-0.3, -0.4, -0.5]
    turns = branch_turns(SimpleNamespace(token_ids=ids, sampled_mask=mask, logprobs=logprobs))
    assert [(t.prompt_ids, t.completion_ids) for t in turns] == [
        ([1, 2, 3], [10, 11]),
        ([1, 2, 3, 10, 11, 4, 5], [12, 13, 14]),
    ]
    assert [t.completion_logprobs for t in turns] == [[-0.1, -0.2], [-0.3, -0.4, -0.5]]
    nothing_sampled = SimpleNamespace(
        token_ids=[1, 2], sampled_mask=[False] * 2, logprobs=[0.0] * 2
    )
    assert branch_turns(nothing_sampled) == []


def test_generate_requests_default_to_the_text_mode():
    assert json.loads(with_text_mode(b'{"token_ids": [1]}')) == {
        "token_ids": [1],
        "output_mode": "text",
    }
    assert json.loads(with_text_mode(b'{"output_mode": "tokens"}')) == {"output_mode": "tokens"}
    assert with_text_mode(b"not json") == b"not json"


def test_the_middleware_rewrites_only_the_generate_route():
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    async def echo(request: Request) -> JSONResponse:
        return JSONResponse(await request.json())

    app = Starlette(
        routes=[
            Route(p, echo, methods=["POST"]) for p in ("/inference/v1/generate", "/v1/completions")
        ]
    )
    client = TestClient(TextModeByDefault(app))
    body = {"token_ids": [1, 2], "note": "x" * 100_000}
    assert client.post("/inference/v1/generate", json=body).json() == body | {"output_mode": "text"}
    assert client.post("/v1/completions", json=body).json() == body


def test_a_traces_completion_is_its_messages_from_the_first_reply_on():
    """As a classic environment's: the archive and the viewer show every turn and tool call of
    a v1 episode, not only its last reply."""
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.types import AssistantMessage, SystemMessage, ToolMessage, UserMessage

    from launcher.view.archive import turns
    from orchestrator.envs.v1 import completion_messages

    call = {"id": "c1", "name": "add", "arguments": '{"a": 2}'}
    nodes = [
        MessageNode(message=SystemMessage(content="be brief")),
        MessageNode(message=UserMessage(content="What is 2 + 3?")),
        MessageNode(message=AssistantMessage(content="", tool_calls=[call]), sampled=True),
        MessageNode(message=ToolMessage(content="5", tool_call_id="c1")),
        MessageNode(message=AssistantMessage(content=" 5 "), sampled=True),
    ]
    trace = SimpleNamespace(
        branches=[SimpleNamespace(nodes=nodes[:3]), SimpleNamespace(nodes=nodes)]
    )
    got = completion_messages(trace)
    assert [m["role"] for m in got] == ["assistant", "tool", "assistant"]
    assert got[0]["tool_calls"][0]["name"] == "add"
    assert (got[1]["content"], got[2]["content"]) == ("5", " 5 ")
    assert json.loads(json.dumps(got)) == got  # plain JSON, as the archive stores it
    shown = turns(json.dumps(got))  # what `rl view` shows of it
    assert shown[0]["tool_calls"] == [{"name": "add", "arguments": '{"a": 2}'}]
    assert [m["content"] for m in shown[1:]] == ["5", " 5 "]
    assert completion_messages(SimpleNamespace(branches=[])) == []
    nothing_sampled = SimpleNamespace(branches=[SimpleNamespace(nodes=nodes[:2])])
    assert completion_messages(nothing_sampled) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("sua t"), st.text(max_size=8)), max_size=8))
def test_any_branch_keeps_every_message_after_the_prompt_in_order(spec):
    """Over generated branches (system, user, assistant sampled or given, tool): the completion
    is exactly the messages from the first sampled one on, as JSON, each shown by the viewer."""
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.types import AssistantMessage, SystemMessage, ToolMessage, UserMessage

    from launcher.view.archive import turns
    from orchestrator.envs.v1 import completion_messages

    make = {
        "s": lambda text: MessageNode(message=SystemMessage(content=text)),
        "u": lambda text: MessageNode(message=UserMessage(content=text)),
        "a": lambda text: MessageNode(message=AssistantMessage(content=text), sampled=True),
        " ": lambda text: MessageNode(message=AssistantMessage(content=text)),  # given, not sampled
        "t": lambda text: MessageNode(message=ToolMessage(content=text, tool_call_id="c")),
    }
    nodes = [make[kind](text) for kind, text in spec]
    got = completion_messages(SimpleNamespace(branches=[SimpleNamespace(nodes=nodes)]))
    first = next((i for i, (kind, _) in enumerate(spec) if kind == "a"), len(spec))
    assert [m["content"] for m in got] == [text for _, text in spec[first:]]
    assert [m["role"] for m in got] == [
        {"s": "system", "u": "user", "a": "assistant", " ": "assistant", "t": "tool"}[kind]
        for kind, _ in spec[first:]
    ]
    assert json.loads(json.dumps(got)) == got
    assert [m["content"] for m in turns(json.dumps(got))] == [text for _, text in spec[first:]]
