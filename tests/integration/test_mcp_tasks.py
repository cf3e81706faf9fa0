"""Agent tasks with MCP tools (`rl tasks`, env `rl-tasks`) on the tiny model: a real stdio MCP
server (examples/mcp_tasks/server.py) records its calls; every rollout sets up and evaluates
its task on a server of its own, and servers that crash or hang cost their rollouts only."""

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.integration.helpers import (
    REPO,
    free_port,
    kill_sessions,
    run_state,
    start_rl,
    tiny_rl_toml,
)

pytestmark = pytest.mark.integration
SERVER = str(REPO / "examples" / "mcp_tasks" / "server.py")


def task(i: int, server: dict, record: Path) -> dict:
    return {
        "id": f"t{i}",
        "prompt": "Open the locker and submit the word inside.",
        "mcp_config": {"locker": {**server, "env": {"RECORD_FILE": str(record)}}},
        "setup_tool": {"name": "setup", "arguments": {"word": f"word{i}"}},
        "evaluate_tool": {"name": "evaluate", "arguments": {"expected": f"word{i}", "floor": 0.25}},
    }


def tasks_data(tmp_path: Path, tasks: list[dict]) -> tuple[Path, str]:
    """`rl tasks` on `tasks`: (the dataset folder it wrote, what it printed)."""
    tasks_file = tmp_path / "tasks.json"
    tasks_file.write_text(json.dumps(tasks))
    data = tmp_path / "tasks_data"
    cmd = [
        sys.executable,
        "-m",
        "launcher.rl",
        "tasks",
        str(tasks_file),
        "--name",
        "t",
        "--out",
        str(data),
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and f'dataset = "{data}"' in done.stdout, done.stderr
    return data, done.stdout


def tasks_toml(model: Path, data: Path, out: Path) -> str:
    """A 2-step tiny run on the tasks in `data`."""
    return (
        tiny_rl_toml(model, out, free_port(), max_steps=2)
        .replace(
            'id = "rl-add-digits"',
            f'id = "rl-tasks"\nargs = {{ dataset = "{data}", max_turns = 2, tool_timeout_s = 10 }}',
        )
        .replace("seq_len = 256", "seq_len = 512")
    )


def test_every_rollout_sets_up_and_evaluates_its_task(tiny_model_dir, tmp_path):
    record = tmp_path / "calls.jsonl"
    good = {"command": "python", "args": [SERVER]}
    crash = {"command": "python", "args": ["-c", "raise SystemExit(3)"]}
    hang = {"command": "python", "args": ["-c", "import time; time.sleep(600)"]}
    tasks = [task(i, good, record) for i in range(6)]
    tasks += [task(6, crash, record), task(7, hang, record)]
    data, told = tasks_data(tmp_path, tasks)
    assert "start local programs" in told and "time.sleep(600)" in told
    out, config = tmp_path / "run", tmp_path / "rl.toml"
    config.write_text(tasks_toml(tiny_model_dir, data, out))
    log = tmp_path / "rl.log"
    rl = start_rl(config, log=log)
    try:
        code = rl.wait(timeout=900)
    finally:
        kill_sessions({rl.pid, *run_state(out).get("pids", {}).values()})
    assert code == 0, log.read_text()[-3000:]
    announced = log.read_text().split("starting orchestrator")[0]
    assert "start these local programs" in announced and "time.sleep(600)" in announced

    calls = [json.loads(line) for line in record.read_text().splitlines()]
    setups = {c["pid"] for c in calls if c["tool"] == "setup"}
    evaluations = {c["pid"] for c in calls if c["tool"] == "evaluate"}
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["component"] == "orchestrator" and "reward" in r]
    errors = sum(r["num_errors"] for r in steps)
    assert len(steps) == 2 and len(setups) + errors == 2 * 8  # one server per rollout
    assert setups == evaluations  # every rollout that was set up was evaluated
    assert all(r["reward"] == pytest.approx(0.25) for r in steps), steps  # the evaluator's
    assert not [pid for pid in setups if psutil.pid_exists(pid)]  # every server stopped


def test_bad_task_files_exit_2_naming_task_and_field(tmp_path):
    tasks_file = tmp_path / "tasks.json"
    tasks_file.write_text(
        json.dumps(
            [
                {
                    "prompt": "ok",
                    "mcp_config": {"s": {"command": "x"}},
                    "evaluate_tool": {"name": "e"},
                },
                {
                    "prompt": "ok",
                    "mcp_config": {"s": {"url": "http://h", "command": "x"}},
                    "evaluate_tool": {"name": "e"},
                },
            ]
        )
    )
    cmd = [sys.executable, "-m", "launcher.rl", "tasks", str(tasks_file), "--name", "bad"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "task 1: mcp_config.s: give exactly one of `url`" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_two_deterministic_task_runs_give_the_same_numbers(tiny_model_dir, tmp_path):
    """`--deterministic` covers agent tasks: MCP servers, tool turns and all."""
    record = tmp_path / "calls.jsonl"
    good = {"command": "python", "args": [SERVER]}
    data, _ = tasks_data(tmp_path, [task(i, good, record) for i in range(4)])
    numbers = []
    for name in ("a", "b"):
        out, config, log = tmp_path / name, tmp_path / f"{name}.toml", tmp_path / f"{name}.log"
        config.write_text(tasks_toml(tiny_model_dir, data, out))
        rl = start_rl(config, "--deterministic", log=log)
        try:
            assert rl.wait(timeout=900) == 0, log.read_text()[-3000:]
        finally:
            kill_sessions({rl.pid, *run_state(out).get("pids", {}).values()})
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        keys = ("step", "reward", "num_tokens", "completion_len", "loss", "entropy", "mismatch_kl")
        training = [r for r in records if r["component"] == "trainer" or "reward" in r]
        numbers.append([[r.get(k) for k in keys] for r in training])
    assert len(numbers[0]) == 4 and numbers[0] == numbers[1], numbers
