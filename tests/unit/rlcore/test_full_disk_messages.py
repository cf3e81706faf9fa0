"""A full disk is one message naming the file and the space left, and its own exit code, never
a traceback (rlcore/files/disk_full.py). /dev/full is a real device that answers every write with
ENOSPC; a full file system of our own is in tests/integration/test_sft_run.py."""

import errno
import sys
from pathlib import Path

import pytest

from rlcore.config.entry import entry_point
from rlcore.files.atomic import append_line
from rlcore.files.disk_full import (
    DISK_FULL_EXIT_CODE,
    DiskFullError,
    disk_full_text,
    exit_disk_full,
    is_disk_full,
    naming,
)

FULL = Path("/dev/full")
pytestmark = pytest.mark.skipif(not FULL.exists(), reason="no /dev/full here")


def test_a_write_that_finds_the_disk_full_names_its_file():
    with pytest.raises(DiskFullError) as caught:
        append_line(FULL, "one line")
    assert caught.value.filename == str(FULL) and caught.value.errno == errno.ENOSPC
    assert is_disk_full(caught.value)


def test_an_error_that_lost_its_errno_is_named_only_on_a_full_file_system(tmp_path):
    """torch's zip writer reports ENOSPC as a RuntimeError without errno; on a disk with room
    (this one) such an error is not a full disk and passes unchanged."""
    with pytest.raises(RuntimeError, match="unexpected pos"), naming(tmp_path / "ckpt"):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")


def test_an_exit_while_handling_a_full_disk_is_not_a_full_disk():
    """`sys.exit` in the handler carries the disk-full error as its context: an outer handler
    that took it for another full disk printed the message twice and lost the exit code."""
    try:
        try:
            FULL.write_text("x")
        except OSError:
            sys.exit(3)
    except SystemExit as exit_:
        assert is_disk_full(exit_.__context__) and not is_disk_full(exit_)


def test_the_message_names_the_file_the_space_and_the_fix(tmp_path, capsys):
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        try:
            with naming(run / "checkpoints" / "step_4"):
                FULL.write_bytes(b"x" * 10)
        except DiskFullError as err:
            exit_disk_full("sft", err, run, "free space and resume with --ckpt.resume-step -1")
    assert exc.value.code == DISK_FULL_EXIT_CODE != 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sft: error: the disk is full: writing ")
    assert f"{run}/checkpoints/step_4 failed (" in err and " free of " in err
    assert err.rstrip().endswith("resume with --ckpt.resume-step -1")


def test_without_a_file_the_message_names_the_output_folder(tmp_path):
    text = disk_full_text(RuntimeError("No space left on device"), tmp_path / "run")
    assert text.startswith(f"the disk is full: a write into {tmp_path / 'run'} failed (")


def test_a_full_disk_no_one_reported_ends_an_entry_point_with_one_message(capsys):
    @entry_point("evals")
    def main() -> None:
        FULL.write_text("results")

    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == DISK_FULL_EXIT_CODE
    err = capsys.readouterr().err
    assert err.startswith("evals: error: the disk is full: a write failed (the current folder has")
    assert err.count("\n") == 1


def test_an_exit_code_of_the_program_survives_the_entry_point(capsys):
    @entry_point("sft")
    def main() -> None:
        try:
            FULL.write_text("x")
        except OSError:
            sys.exit(5)

    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 5 and capsys.readouterr().err == ""


def test_a_message_that_does_not_fit_still_exits_with_the_code(monkeypatch):
    """stderr may be a log on the full disk: the launcher reports the exit code instead."""
    monkeypatch.setattr(sys, "stderr", FULL.open("w", buffering=1))
    with pytest.raises(SystemExit) as exc:
        exit_disk_full("trainer", OSError(errno.ENOSPC, "full"), FULL, "free space")
    assert exc.value.code == DISK_FULL_EXIT_CODE
