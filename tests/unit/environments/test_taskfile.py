"""tasks.json checks (environments/rl_tasks/taskfile.py) and reward parsing."""

import json

import pytest
from rl_tasks import parse_calls, reward_of
from rl_tasks.taskfile import TaskError, expand, load_tasks

GOOD = {
    "prompt": "do it",
    "mcp_config": {"hud": {"url": "http://localhost:8765/mcp", "headers": {"A": "Bearer $K"}}},
    "setup_tool": {"name": "setup", "arguments": {"name": "f"}},
    "evaluate_tool": {"name": "evaluate", "arguments": {"expected": "v"}},
    "metadata": {"difficulty": "easy"},
}


def write(tmp_path, data):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(data))
    return path


def test_one_task_or_a_list(tmp_path):
    assert load_tasks(write(tmp_path, GOOD))[0]["id"] == "task-000"
    assert [t["id"] for t in load_tasks(write(tmp_path, [GOOD, {**GOOD, "id": "x"}]))] == [
        "task-000",
        "x",
    ]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"prompt": ""}, "task 1: `prompt` is missing or empty"),
        ({"mcp_config": {}}, "task 1: mcp_config: expected an object naming one MCP server"),
        ({"mcp_config": {"s": {"url": "u", "command": "c"}}}, "mcp_config.s: give exactly one"),
        ({"mcp_config": {"s": {"command": "c", "port": 1}}}, "unknown key(s) ['port']"),
        (
            {"mcp_config": {"s": {"command": "c", "args": "x"}}},
            "mcp_config.s.args: expected a list",
        ),
        ({"setup_tool": {"tool": "x"}}, "setup_tool: unknown key(s) ['tool']"),
        ({"evaluate_tool": {"arguments": {}}}, "evaluate_tool.name: the tool's name is missing"),
        ({"extra": 1}, "unknown field(s) ['extra']"),
    ],
)
def test_bad_tasks_name_the_index_and_field(tmp_path, change, words):
    with pytest.raises(TaskError) as err:
        load_tasks(write(tmp_path, [GOOD, {**GOOD, **change}]))
    assert words in str(err.value) and "task 1" in str(err.value)


def test_not_json_and_missing_evaluate(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text("{oops")
    with pytest.raises(TaskError, match="not valid JSON"):
        load_tasks(path)
    without = {k: v for k, v in GOOD.items() if k != "evaluate_tool"}
    with pytest.raises(TaskError, match="`evaluate_tool` is missing"):
        load_tasks(write(tmp_path, without))


def test_variables_expand_or_fail_by_name():
    assert expand("Bearer $K and ${K}", {"K": "s3"}) == "Bearer s3 and s3"
    with pytest.raises(TaskError, match=r"\$HUD_API_KEY is not set"):
        expand("Bearer $HUD_API_KEY", {})


def test_rewards_and_tool_calls_are_read_from_text():
    assert reward_of("0.5") == 0.5 and reward_of('{"reward": 1}') == 1.0
    assert reward_of('{"result": "{\\"reward\\": 0.25}"}') == 0.25
    message = type("M", (), {"content": 'x <tool_call>{"name": "a", "arguments": {}}</tool_call>'})
    assert parse_calls(message) == [{"name": "a", "arguments": {}}]
    assert parse_calls(type("M", (), {"content": "<tool_call>nope</tool_call>"}))[0]["error"]
