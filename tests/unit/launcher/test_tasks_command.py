"""`rl tasks` on real files: the programs the tasks start are named first; a bad name, an
existing file or a folder it did not write is refused (exit 2) and left alone; duplicate task
ids are refused naming both; its own dataset is replaced."""

import json
from pathlib import Path

from launcher.commands import run_command
from launcher.commands.tasks import DATASET_MARKER

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "examples" / "mcp_tasks" / "tasks.json"


def test_tasks_names_the_local_programs_and_writes_a_marked_dataset(tmp_path, capsys):
    out = tmp_path / "data"
    assert run_command("tasks", [str(TASKS), "--name", "locker", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "start local programs" in printed and "python examples/mcp_tasks/server.py" in printed
    assert printed.index("local programs") < printed.index("written to")
    assert (out / DATASET_MARKER).is_file() and (out / "dataset_info.json").is_file()
    assert run_command("tasks", [str(TASKS), "--name", "locker", "--out", str(out)]) == 0


def test_bad_names_and_foreign_outputs_are_refused(tmp_path, capsys):
    taken = tmp_path / "taken.txt"
    taken.write_text("mine\n")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.md").write_text("mine\n")
    cases = [
        (["--name", "../escape"], "plain name"),
        (["--name", "a/b"], "plain name"),
        (["--name", ".."], "plain name"),
        (["--name", "x", "--out", str(taken)], "not a folder"),
        (["--name", "x", "--out", str(foreign)], "not a dataset written by `rl tasks`"),
    ]
    for flags, words in cases:
        assert run_command("tasks", [str(TASKS), *flags]) == 2, flags
        assert words in capsys.readouterr().err, flags
    assert taken.read_text() == "mine\n" and [p.name for p in foreign.iterdir()] == ["notes.md"]


def test_duplicate_task_ids_are_refused(tmp_path, capsys):
    tasks = json.loads(TASKS.read_text())
    tasks[3]["id"] = tasks[1]["id"]
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(tasks))
    assert run_command("tasks", [str(path), "--name", "x", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"task 3 has id {tasks[1]['id']!r}, like task 1" in err
    assert not (tmp_path / "o").exists()
