"""The bounded reader of run folders (rlcore.files.readback) and run.json's checked record
(rlcore.runs.run_json): anything a folder holds is read within its bound or named as damaged, in one
line, never a hang, a traceback or unbounded memory."""

import json
import math
import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcore.files import readback
from rlcore.files.readback import Bound, Damaged
from rlcore.runs import run_json


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    found = []
    reader = threading.Thread(target=lambda: found.append(catch(fifo)), daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert found == [f"damaged run folder: {fifo}: is a FIFO, not a regular file"]


def catch(path, root=None, bound=readback.RUN_JSON):
    try:
        readback.read_json(path, bound, root)
    except Damaged as err:
        return str(err)
    return None


def test_a_link_out_of_the_run_is_refused_and_one_inside_is_followed(tmp_path):
    (tmp_path / "zero").symlink_to("/dev/zero")
    assert catch(tmp_path / "zero", tmp_path).endswith("is a link out of the run (to /dev/zero)")
    (tmp_path / "real.json").write_text('{"a": 1}')
    (tmp_path / "alias.json").symlink_to("real.json")
    assert readback.read_json(tmp_path / "alias.json", readback.SMALL, tmp_path) == {"a": 1}
    assert "is a link" in catch(tmp_path / "alias.json", None)


def test_a_folder_linked_out_of_the_run_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "trainer.log").write_text("not the run's")
    run = tmp_path / "run"
    run.mkdir()
    (run / "logs").symlink_to(outside)
    with pytest.raises(Damaged, match="lies in a folder linked out of the run"):
        readback.read_tail(run / "logs" / "trainer.log", readback.LOG_TAIL, run)
    assert readback.read_tail(outside / "trainer.log", readback.LOG_TAIL)[0] == b"not the run's"


def test_a_device_and_a_folder_are_not_regular_files(tmp_path):
    assert "a character device" in catch(readback.Path("/dev/null"))
    (tmp_path / "d").mkdir()
    assert catch(tmp_path / "d").endswith("is a folder, not a regular file")


def test_a_file_over_its_bound_is_refused_before_it_is_read(tmp_path):
    huge = tmp_path / "metrics.jsonl"
    with huge.open("wb") as f:
        f.truncate(2**31)  # sparse: 2 GiB that take no disk
    bound = Bound("metrics.jsonl", 1000)
    with pytest.raises(Damaged, match=r"2,147,483,648 bytes, over the 1,000-byte bound"):
        readback.read_bytes(huge, bound)
    tail, start = readback.read_tail(huge, bound)
    assert (len(tail), start) == (1000, 2**31 - 1000)
    assert readback.read_from(huge, 5, bound) == b"\0" * 1000


def test_json_deeper_than_the_bound_is_damaged_and_never_a_recursion_error(tmp_path):
    for depth in (65, 5_000, 100_000):
        path = tmp_path / f"d{depth}.json"
        path.write_text("[" * depth + "]" * depth)
        assert catch(path).endswith("JSON nested deeper than 64 levels")
    path.write_text("[" * 64 + "]" * 64)
    assert catch(path) is None


def test_bytes_that_are_not_json_say_where_they_broke(tmp_path):
    path = tmp_path / "run.json"
    path.write_bytes(b'{"status": "runn')
    assert "not JSON (Unterminated string" in catch(path)
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert "not JSON" in catch(path)


def test_json_safe_turns_what_strict_json_refuses_into_words():
    value = {"a": math.nan, "b": [math.inf, -math.inf], "c": "x\ud800y", 3: (1, 2)}
    safe = readback.json_safe(value)
    assert safe == {"a": "NaN", "b": ["Infinity", "-Infinity"], "c": "x\ufffdy", "3": [1, 2]}
    json.dumps(safe, allow_nan=False).encode("utf-8")


def test_shown_prints_any_name_within_its_bound():
    name = os.fsdecode(b"/runs/\xff\xfe-run\n")
    assert readback.shown(name) == "/runs/\ufffd\ufffd-run\\n"
    assert readback.shown("x\ud800") == "x\ufffd"
    long = readback.shown("k" * 1_000_000)
    assert len(long) == 203 and long.startswith("k" * 100) and "..." in long


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_are_json_or_damaged(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("rb") / "state.json"
    path.write_bytes(data)
    try:
        value = readback.read_json(path, readback.STATE)
    except Damaged as err:
        assert "\n" not in str(err) and str(err).startswith("damaged run folder: ")
        return
    json.dumps(readback.json_safe(value), allow_nan=False).encode("utf-8")


RECORDED = {
    "status": "running",
    "launcher_pid": 4242,
    "pids": {"inference": 4243, "trainer": 4244},
    "identities": {"launcher": {"pid": 4242}},
    "slurm_job_id": "123_4",
}


def test_run_json_as_rl_writes_it_is_read_back_whole():
    record = run_json.parse(RECORDED)
    assert (record.status, record.launcher_pid, record.slurm_job_id) == ("running", 4242, "123_4")
    assert record.pids == {"inference": 4243, "trainer": 4244}
    assert run_json.parse({"slurm_job_id": 99}).slurm_job_id == "99"


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("slurm_job_id", "--me", "slurm_job_id is not a SLURM job id"),
        ("slurm_job_id", "--user=alice", "slurm_job_id is not a SLURM job id"),
        ("slurm_job_id", [1], "slurm_job_id is not a SLURM job id"),
        ("slurm_job_id", "12 34", "slurm_job_id is not a SLURM job id"),
        ("slurm_job_id", True, "slurm_job_id is not a SLURM job id"),
        ("launcher_pid", 2**63, "launcher_pid is not a pid"),
        ("launcher_pid", -1, "launcher_pid is not a pid"),
        ("launcher_pid", "42", "launcher_pid is not a pid"),
        ("pids", {"trainer": 2**63}, "pids is not an object of names and pids"),
        ("pids", [1, 2], "pids is not an object of names and pids"),
        ("identities", {"launcher": 5}, "identities is not an object"),
        ("status", "x" * 1000, "status is not a short word"),
        ("status", ["running"], "status is not a short word"),
    ],
)
def test_a_field_anything_acts_on_is_checked(key, value, why):
    with pytest.raises(Damaged, match=f"damaged run folder: run.json: {why}"):
        run_json.parse({**RECORDED, key: value})


def test_pid_alive_takes_any_value_read_back():
    from rlcore.processes.procs import pid_alive

    assert pid_alive(os.getpid())
    for value in (2**63, -5, 0, "1", None, [1], True, 2**22 + 1):
        assert not pid_alive(value)
