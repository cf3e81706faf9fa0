"""A small offline MCP server (stdio) for the `rl-tasks` example: a locker holding one secret
word. `setup` puts a word in it, the model can `open_locker` to read it and must `submit` it;
`evaluate` scores what was submitted. With RECORD_FILE set, every call is appended to that
file as a JSON line (the tests read it).

    python examples/mcp_tasks/server.py        # speaks MCP on stdin/stdout
"""

import json
import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("locker", log_level="WARNING")
state = {"word": None, "submitted": None, "opened": False}


def record(tool: str, **arguments) -> None:
    path = os.environ.get("RECORD_FILE")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "tool": tool, **arguments}) + "\n")


@server.tool()
def setup(word: str) -> str:
    """Start a task: put `word` in the locker (called by the environment, not the model)."""
    record("setup", word=word)
    state.update(word=word, submitted=None, opened=False)
    return "ready"


@server.tool()
def open_locker() -> str:
    """Open the locker and read the secret word inside."""
    record("open_locker")
    state["opened"] = True
    return f"The locker holds the word: {state['word']}"


@server.tool()
def submit(word: str) -> str:
    """Submit your answer: the secret word."""
    record("submit", word=word)
    state["submitted"] = word.strip().lower()
    return "submitted"


@server.tool()
def evaluate(expected: str, floor: float = 0.0) -> str:
    """Score the task (called by the environment): 1 for the right word submitted, 0.2 for
    having opened the locker, else 0; never below `floor`."""
    reward = 1.0 if state["submitted"] == expected.lower() else 0.2 if state["opened"] else 0.0
    reward = max(reward, floor)
    record("evaluate", expected=expected, reward=reward)
    return json.dumps({"reward": reward})


if __name__ == "__main__":
    server.run("stdio")
