"""`.env`: one reader (rl_files.env_file) for rlcore.secrets, W&B's key and rl_tasks; a bad line
is an error naming the file and line, never quoting a value."""

import pytest
from rl_files.env_file import DotenvError, read_dotenv
from rl_tasks.taskfile import TaskError, expand

from rlcore.errors import ConfigError
from rlcore.secrets import resolve

SECRET = "sk-not-for-messages-9876"


def test_the_usual_syntax(tmp_path):
    path = tmp_path / ".env"
    path.write_text(
        "# keys\n\nA=1\nexport B='two words'\nC=\"x # y\"  # note\nD=plain # note\n"
        "E=\nDECLARED_ONLY\nF = spaced\n"
    )
    assert read_dotenv(path) == {
        "A": "1",
        "B": "two words",
        "C": "x # y",
        "D": "plain",
        "E": "",
        "F": "spaced",
    }


def test_no_file_sets_nothing(tmp_path):
    assert read_dotenv(tmp_path / ".env") == {}


@pytest.mark.parametrize("line", [f"TOKEN='{SECRET}", f"not a line {SECRET}", f'TOKEN="{SECRET}'])
def test_a_bad_line_names_the_file_and_line_not_its_value(tmp_path, line):
    path = tmp_path / ".env"
    path.write_text(f"GOOD=1\n# fine\n{line}\n")
    with pytest.raises(DotenvError) as err:
        read_dotenv(path)
    assert f"{path}, line 3:" in str(err.value) and SECRET not in str(err.value)


def test_not_utf8_is_named(tmp_path):
    path = tmp_path / ".env"
    path.write_bytes(b"TOKEN=\xff\xfe\n")
    with pytest.raises(DotenvError, match="is not UTF-8"):
        read_dotenv(path)


def test_both_users_read_it_and_the_environment_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("API_KEY=from-file\nOTHER=file-only\n")
    monkeypatch.setenv("API_KEY", "from-env")
    assert resolve({"api_key": "$API_KEY"}, "args") == {"api_key": "from-env"}
    assert expand("Bearer $OTHER / $API_KEY") == "Bearer file-only / from-env"


def test_each_user_reports_a_bad_file_its_own_way(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("BROKEN LINE\n")
    with pytest.raises(ConfigError, match=r"\.env, line 1:"):
        resolve({"api_key": "$API_KEY"}, "args")
    with pytest.raises(TaskError, match=r"\.env, line 1:"):
        expand("$API_KEY")
