"""The numeric choices a run recorded in run.json (rlcore/runs/run_json.py), read back as
untrusted data by a resume (`rl`) and by `rl eval --run`: real files, damaged ones included."""

import json
import os

from rlcore.runs.run_json import changed_choices, recorded_choices

CHOICES = {"isa": "avx512_bf16", "trainer.model.dtype": "bfloat16", "inference.model.dtype": ""}


def write_run_json(root, data) -> None:
    root.mkdir(exist_ok=True)
    (root / "run.json").write_text(json.dumps(data))


def test_the_recorded_choices_are_read_back(tmp_path):
    write_run_json(tmp_path, {"status": "stopped", "numeric_choices": CHOICES})
    assert recorded_choices(tmp_path) == CHOICES


def test_changes_name_what_changed_and_skip_what_an_older_run_lacks():
    recorded = {"isa": "avx512_bf16", "trainer.model.dtype": "bfloat16"}
    now = {"isa": "avx2", "trainer.model.dtype": "bfloat16", "inference.model.dtype": "float32"}
    assert changed_choices(recorded, now) == ["isa avx512_bf16 -> avx2"]
    assert changed_choices({}, now) == []


def test_a_missing_or_damaged_run_json_records_no_choice(tmp_path):
    assert recorded_choices(tmp_path / "none") == {}
    (tmp_path / "run.json").write_text("{not json")
    assert recorded_choices(tmp_path) == {}
    write_run_json(tmp_path, {"numeric_choices": ["isa", "avx2"]})
    assert recorded_choices(tmp_path) == {}
    write_run_json(tmp_path, {"pids": "forged", "numeric_choices": CHOICES})  # a damaged field
    assert recorded_choices(tmp_path) == {}


def test_a_fifo_for_run_json_is_refused_not_waited_on(tmp_path):
    """`rl eval --run` once read run.json with a plain read: a FIFO there hung it."""
    os.mkfifo(tmp_path / "run.json")
    assert recorded_choices(tmp_path) == {}


def test_forged_values_are_left_out_never_printed(tmp_path):
    forged = {
        "isa": "\x1b]52;c;aGk=\x07avx2",
        "trainer.model.dtype": "b" * 41,
        "inference.model.dtype": 16,
        "x\ny": "float32",
        "inference.cpu.matmul_dtype": "float32",
    }
    write_run_json(tmp_path, {"numeric_choices": forged})
    assert recorded_choices(tmp_path) == {"inference.cpu.matmul_dtype": "float32"}
    now = {"isa": "avx2", "inference.cpu.matmul_dtype": "bfloat16"}
    assert changed_choices(recorded_choices(tmp_path), now) == [
        "inference.cpu.matmul_dtype float32 -> bfloat16"
    ]
