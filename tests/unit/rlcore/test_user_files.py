"""Every file a user names (`@` configs, `--config`, `slurm.template`, `.env`, tasks files, the
lock file) is read through one door (rl_files.user_file): a device, a FIFO or a file over the
size limit is refused unread, with one message naming the file, what it is and the fix; never a
hang, never a read without end."""

import os
from pathlib import Path

import pytest
from rl_files.env_file import DotenvError, read_dotenv
from rl_files.user_file import MAX_CONFIG_BYTES, UserFileError, read_user_file
from rl_tasks.taskfile import TaskError, read_json

from launcher import slurm
from launcher.lockfile import MAX_YAML_BYTES, read_yaml
from launcher.prepare import build_plan
from launcher.rl_config import RLConfig
from rlcore.config.entry import parse_config
from rlcore.errors import ConfigError

SECTIONS = ("trainer", "orchestrator", "inference")


def at_config(path: Path) -> None:
    parse_config(RLConfig, "rl", ["--trainer", "@", str(path)], sections=SECTIONS)


def workflow(path: Path) -> None:
    read_yaml(path, "the workflow config")


def template(path: Path) -> None:
    argv = ["--slurm.template", str(path), "--slurm.gpus-per-node", "0", "--output-dir", "run"]
    config, _ = parse_config(RLConfig, "rl", argv, sections=SECTIONS)
    plan = build_plan(config, dry_run=True)
    slurm.job_script(plan, plan.run.config_file("rl"))


def dotenv(path: Path) -> None:
    read_dotenv(path)


def tasks(path: Path) -> None:
    read_json(path)


READERS = {
    "at_config": at_config,
    "workflow": workflow,
    "template": template,
    "dotenv": dotenv,
    "tasks": tasks,
}
LIMITS = {"workflow": MAX_YAML_BYTES}


def refused(reader: str, path: Path, capsys) -> str:
    """The one message a reader gives for `path` (an exception's text, or exit 2's stderr)."""
    errors = (ConfigError, DotenvError, TaskError, SystemExit)
    with pytest.raises(errors) as exc:
        READERS[reader](path)
    if isinstance(exc.value, SystemExit):
        assert exc.value.code == 2
        message = capsys.readouterr().err
    else:
        message = str(exc.value)
    assert "Traceback" not in message and str(path) in message, message
    return message


def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.toml"
    os.mkfifo(path)
    return path


def too_big(tmp_path: Path, reader: str) -> Path:
    path = tmp_path / "big.toml"
    with path.open("wb") as handle:  # sparse: no disk used
        handle.truncate(LIMITS.get(reader, MAX_CONFIG_BYTES) + 1)
    return path


@pytest.mark.timeout(20)
@pytest.mark.parametrize("reader", READERS)
def test_a_fifo_is_refused_without_blocking(tmp_path, capsys, monkeypatch, reader):
    monkeypatch.chdir(tmp_path)
    message = refused(reader, fifo(tmp_path), capsys)
    assert "not a regular file" in message and "FIFO" in message, message


@pytest.mark.timeout(20)
@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("link", [False, True], ids=["dev_zero", "link_to_dev_zero"])
def test_a_device_is_refused_unread(tmp_path, capsys, monkeypatch, reader, link):
    monkeypatch.chdir(tmp_path)
    path = Path("/dev/zero")
    if link:
        path = tmp_path / "zero.toml"
        path.symlink_to("/dev/zero")
    message = refused(reader, path, capsys)
    assert "not a regular file" in message and "device" in message, message


@pytest.mark.timeout(20)
@pytest.mark.parametrize("reader", READERS)
def test_a_file_over_the_limit_is_refused_unread_naming_the_limit(
    tmp_path, capsys, monkeypatch, reader
):
    monkeypatch.chdir(tmp_path)
    path = too_big(tmp_path, reader)
    message = refused(reader, path, capsys)
    limit_mib = LIMITS.get(reader, MAX_CONFIG_BYTES) >> 20
    assert f"over the {limit_mib} MiB limit" in message, message


def test_the_door_reads_a_regular_file_and_a_link_to_one(tmp_path):
    path = tmp_path / "c.toml"
    path.write_bytes(b"seed = 1\n")
    (tmp_path / "link.toml").symlink_to(path)
    assert read_user_file(path, "config file") == b"seed = 1\n"
    assert read_user_file(tmp_path / "link.toml", "config file") == b"seed = 1\n"


@pytest.mark.parametrize("kind", ["missing", "folder"])
def test_the_door_names_a_missing_file_or_a_folder(tmp_path, kind):
    path = tmp_path / "c.toml"
    if kind == "folder":
        path.mkdir()
    with pytest.raises(UserFileError, match="does not exist" if kind == "missing" else "folder"):
        read_user_file(path, "config file")


def test_a_dotenv_folder_is_not_a_dotenv_file(tmp_path):
    """A virtual environment called `.env` is common: it sets no variables, and is no error."""
    (tmp_path / ".env").mkdir()
    assert read_dotenv(tmp_path / ".env") == {}
