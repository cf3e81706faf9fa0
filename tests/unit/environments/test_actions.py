"""Text tool calls through a workflow's action mappings, the format score and the weighted
rubric terms (environments/rl_tasks/actions.py)."""

import pytest
from rl_tasks import format_compliance, parse_calls, task_completion, tool_execution
from rl_tasks.actions import ActionError, Workflow, format_score, parse_call, to_mcp_call

MAPPINGS = {
    "left": {"_tool": "move", "_parser": {"positional": []}, "direction": {"static": "left"}},
    "move": {
        "_tool": "move",
        "_parser": {"positional": ["direction"]},
        "direction": {"from_arg": "direction"},
    },
}
PARAMS = {"move": ["direction"], "submit": ["word", "note"]}


def workflow(**parser) -> Workflow:
    return Workflow.from_args(
        parser,
        MAPPINGS,
        {"weights": {"task_completion": 0.8, "tool_execution": 0.1, "format_compliance": 0.1}},
    )


def test_text_calls_parse_with_bare_words_literals_and_keywords():
    assert parse_call("move(up)") == ("move", ["up"], {})
    assert parse_call(" submit('apple', note=3) ") == ("submit", ["apple"], {"note": 3})
    for bad in ("move(", "move", "os.system('x')", "move(f(1))", "1 + 2"):
        with pytest.raises(ActionError):
            parse_call(bad)


def test_mappings_turn_actions_into_mcp_calls():
    wf = workflow()
    assert to_mcp_call("left", [], {}, wf, PARAMS) == ("move", {"direction": "left"})
    assert to_mcp_call("move", ["up"], {}, wf, PARAMS) == ("move", {"direction": "up"})
    assert to_mcp_call("submit", ["apple"], {}, wf, PARAMS) == ("submit", {"word": "apple"})
    with pytest.raises(ActionError, match="needs the argument `direction`"):
        to_mcp_call("move", [], {}, wf, PARAMS)
    with pytest.raises(ActionError, match="no tool `jump`"):
        to_mcp_call("jump", [], {}, wf, PARAMS)
    with pytest.raises(ActionError, match="at most 2"):
        to_mcp_call("submit", [1, 2, 3], {}, wf, PARAMS)


def test_bad_sections_are_refused_naming_the_key():
    with pytest.raises(ValueError, match="rubric.weights: unknown term"):
        Workflow.from_args({}, {}, {"weights": {"speed": 1.0}})
    with pytest.raises(ValueError, match="action_mappings.left: needs `_tool`"):
        Workflow.from_args({}, {"left": {"direction": {"static": "l"}}}, {})
    with pytest.raises(ValueError, match="exactly one of `static` or `from_arg`"):
        Workflow.from_args({}, {"left": {"_tool": "move", "direction": {}}}, {})
    with pytest.raises(ValueError, match="parser: unknown key"):
        Workflow.from_args({"xml": 1}, {}, {})


def test_format_score_weighs_the_tag_and_the_action():
    wf = workflow()
    assert format_score("<tool>left()</tool>", wf, valid_action=True) == pytest.approx(1.0)
    assert format_score("<tool>jump()</tool>", wf, valid_action=False) == pytest.approx(0.6)
    assert format_score("<tool>a()</tool><tool>b()</tool>", wf, True) == 0.0
    thinking = workflow(use_thinking=True)
    assert format_score("<tool>left()</tool>", thinking, True) == 0.0
    assert format_score("<think>go</think><tool>left()</tool>", thinking, True) == 1.0


def test_text_native_and_json_calls_are_all_found():
    class Message:
        content = 'x <tool>left()</tool> <tool_call>{"name": "submit", "arguments": {}}</tool_call>'
        tool_calls = None

    assert parse_calls(Message()) == [{"name": "submit", "arguments": {}}, {"text": "left()"}]


def test_rubric_terms_read_the_rollout_state():
    state = {"task_reward": 0.5, "num_calls": 4, "num_ok_calls": 3, "format_scores": [1.0, 0.6]}
    assert task_completion(state) == 0.5
    assert tool_execution(state) == 0.75
    assert format_compliance(state) == pytest.approx(0.8)
    assert tool_execution({"num_calls": 0}) == 0.0 and format_compliance({}) == 0.0
