"""Durable writes: a marker appears only after every file it vouches for was fsync'd, a failed
write leaves no temporary behind, and a torn metrics line is cut back off."""

import os
from pathlib import Path

import pytest

from rlcore.files import atomic as files
from rlcore.files.disk_full import DiskFullError
from rlcore.runs.rundir import STABLE, RunDir


def test_stable_is_written_after_every_file_of_the_folder_is_on_disk(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run")
    folder = run.weight_dir(3)
    folder.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (folder / name).write_text(name)
    synced: list[tuple[str, bool]] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        synced.append((path.name, (folder / STABLE).exists()))
        real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", spy)
    run.mark_weights_stable(3)
    before_marker = {name for name, marker_there in synced if not marker_there}
    assert {"config.json", "model.safetensors", "tokenizer.json", "step_3"} <= before_marker
    assert run.weights_stable(3)


def test_a_failed_atomic_write_leaves_no_temporary(tmp_path):
    target = tmp_path / "taken"
    target.mkdir()  # a file cannot replace a folder
    with pytest.raises(OSError):
        files.atomic_write_text(target, "x")
    assert [p.name for p in tmp_path.iterdir()] == ["taken"] and target.is_dir()


def test_a_failed_folder_write_leaves_no_temporary_and_the_old_folder(tmp_path):
    final = tmp_path / "step_1"
    final.mkdir()
    (final / "old").write_text("kept")
    with pytest.raises(RuntimeError), files.atomic_folder(final) as tmp:
        (tmp / "half").write_text("half")
        raise RuntimeError("the writer failed")
    assert [p.name for p in tmp_path.iterdir()] == ["step_1"]
    assert (final / "old").read_text() == "kept"


def test_owner_only_files_are_never_readable_by_others(tmp_path, monkeypatch):
    seen_modes = []
    real_open = os.open

    def spy(path, flags, mode=0o777, *args):
        fd = real_open(path, flags, mode, *args)
        seen_modes.append(os.fstat(fd).st_mode & 0o777)
        return fd

    monkeypatch.setattr(files.os, "open", spy)
    files.atomic_write_text(tmp_path / "admin_token", "secret\n", mode=0o600)
    assert seen_modes and seen_modes[0] == 0o600  # from the moment the file exists


def test_a_torn_append_is_cut_back_off(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n')

    class Full(Exception):
        pass

    class Handle:
        """A file that accepts half the line and then reports a full disk."""

        def __init__(self, inner):
            self.inner = inner

        def write(self, data: bytes) -> int:
            self.inner.write(data[: len(data) // 2])
            self.inner.flush()
            raise Full("No space left on device")

        def __getattr__(self, name):
            return getattr(self.inner, name)

    real_open = Path.open

    def opener(self, mode="r", *args, **kwargs):
        handle = real_open(self, mode, *args, **kwargs)
        if self == path and "a" in mode:
            return _Context(Handle(handle))
        return handle

    class _Context:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self.handle

        def __exit__(self, *exc):
            self.handle.inner.close()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "open", opener)
        with pytest.raises(DiskFullError) as caught:
            files.append_line(path, '{"step": 2, "reward": 0.5}')
    assert isinstance(caught.value.__cause__, Full) and caught.value.filename == str(path)
    assert path.read_text() == '{"step": 1}\n'


def test_a_path_of_a_user_who_does_not_exist_names_the_user():
    """`~nosuchuser/x` was blamed on the home directory ("Could not determine home directory")."""
    from rlcore.errors import ConfigError
    from rlcore.files.paths import user_path

    expected = r"'~nosuchuser-rl/x' is not a usable path \(it names user 'nosuchuser-rl', who"
    with pytest.raises(ConfigError, match=expected):
        user_path("~nosuchuser-rl/x", "--output-dir")
    assert user_path("~/x", "--output-dir") == Path.home().resolve() / "x"
