"""The `[slurm]` options a cluster user sets: each reaches the job script, and a bad one is one
message naming the flag, the value and the fix (exit 2), before anything is written."""

import pytest

from launcher import slurm
from launcher.prepare import build_plan
from launcher.rl_config import RLConfig
from rlcore.config.entry import parse_config
from rlcore.errors import ConfigError

CPU_JOB = ["--slurm.nodes", "3", "--slurm.trainer-nodes", "2", "--slurm.gpus-per-node", "0"]


def script_for(tmp_path, *argv: str) -> str:
    config, _ = parse_config(
        RLConfig,
        "rl",
        [*CPU_JOB, "--output-dir", str(tmp_path / "run"), *argv],
        sections=("trainer", "orchestrator", "inference"),
    )
    plan = build_plan(config, dry_run=True)
    return slurm.job_script(plan, plan.run.config_file("rl"))


def test_every_option_reaches_the_script(tmp_path):
    script = script_for(
        tmp_path,
        "--slurm.partition",
        "cpu",
        "--slurm.account",
        "lab",
        "--slurm.time",
        "2-00:00:00",
        "--slurm.sbatch-lines",
        '["--qos=high", "--mem=0"]',
        "--slurm.setup",
        '["module load cuda", "source .venv/bin/activate"]',
        "--slurm.job-name",
        "mine",
    )
    lines = script.splitlines()
    for line in (
        "#SBATCH --partition=cpu",
        "#SBATCH --account=lab",
        "#SBATCH --time=2-00:00:00",
        "#SBATCH --qos=high",
        "#SBATCH --mem=0",
        "#SBATCH --job-name=mine",
        "module load cuda",
        "source .venv/bin/activate",
    ):
        assert line in lines, script
    output = next(line for line in lines if line.startswith("#SBATCH --output="))
    assert output == f"#SBATCH --output={tmp_path / 'run' / 'logs' / 'slurm-%j.log'}"
    assert lines.index("module load cuda") < lines.index(lines[-1])  # setup runs before rl
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--slurm.time", "tomorrow"], ["slurm.time = 'tomorrow'", "HH:MM:SS"]),
        (["--slurm.time", "1:2:3:4"], ["slurm.time = '1:2:3:4'", "D-HH:MM:SS"]),
        (["--slurm.partition", "gpu fast"], ["slurm.partition = 'gpu fast'", "one word"]),
        (["--slurm.account", ""], ["slurm.account = ''", "one word"]),
        (["--slurm.job-name", "a\nb"], ["slurm.job_name", "line breaks"]),
        (
            ["--slurm.sbatch-lines", '["qos=high"]'],
            ["slurm.sbatch_lines[0] = 'qos=high'", "e.g. '--qos=high'"],
        ),
        (["--slurm.sbatch-lines", '["--qos=high\\nrm -rf x"]'], ["one option per entry"]),
        (
            ["--slurm.sbatch-lines", '["--mem=0", "--time=01:00:00"]'],
            ["slurm.sbatch_lines[1]", "already writes --time", "set slurm.time instead"],
        ),
        (["--slurm.sbatch-lines", '["-o /tmp/x.log"]'], ["already writes -o", "drop it"]),
        (
            ["--slurm.time", "99999999999999999999"],
            ["slurm.time = '99999999999999999999'", "at most 365 days", "D-HH:MM:SS"],
        ),
        (["--slurm.time", "366-00:00:00"], ["slurm.time = '366-00:00:00'", "at most 365 days"]),
        (["--slurm.time", "1-24:00:00"], ["slurm.time = '1-24:00:00'", "hours below 24"]),
        (["--slurm.time", "10:75:00"], ["slurm.time = '10:75:00'", "minutes and seconds below 60"]),
        (
            ["--slurm.setup", '["module load cuda\\ntouch PWNED"]'],
            ["slurm.setup[0]", "line break or other control character", "one shell line per entry"],
        ),
        (["--slurm.sbatch-lines", '["--qos=high\\u001b[2J"]'], ["slurm.sbatch_lines[0]"]),
        (["--slurm.partition", "gpu\x00"], ["slurm.partition", "one word"]),
    ],
)
def test_a_bad_option_is_exit_2_naming_flag_value_and_fix(capsys, argv, words):
    with pytest.raises(SystemExit) as exc:
        parse_config(RLConfig, "rl", [*CPU_JOB, *argv], sections=("trainer",))
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err, err
    for word in words:
        assert word in err, err


@pytest.mark.parametrize(
    "time",
    [
        "90",
        "30:00",
        "24:00:00",
        "2-12",
        "2-12:30",
        "UNLIMITED",
        "0",
        "525600",
        "365-00:00:00",
        "48:00:00",
        "90:30",
    ],
)
def test_slurms_time_forms_are_accepted(time):
    assert RLConfig.model_validate({"slurm": {"time": time}}).slurm.time == time


def test_a_template_with_an_unknown_placeholder_is_a_config_error(tmp_path):
    template = tmp_path / "job.tmpl"
    template.write_text("#!/bin/bash\n#SBATCH -N {nodes}\necho ${HOME}\n{command}\n")
    with pytest.raises(ConfigError, match=r"slurm.template .*job.tmpl.*\$\{\{HOME\}\}"):
        script_for(tmp_path, "--slurm.template", str(template))
    template.write_text("#!/bin/bash\n#SBATCH -N {nodes}\necho ${{HOME}}\n{command}\n")
    assert "echo ${HOME}" in script_for(tmp_path, "--slurm.template", str(template))


def with_sbatch(monkeypatch) -> None:
    """`sbatch` on PATH as far as `submit` asks (it is never reached: the refusal comes first)."""
    which = slurm.shutil.which
    monkeypatch.setattr(
        slurm.shutil, "which", lambda name: "/bin/sbatch" if name == "sbatch" else which(name)
    )


CONTROL = {
    "line_break": "\n",
    "carriage_return": "\r",
    "escape": "\x1b",
    "line_separator": "\u2028",
}


@pytest.mark.parametrize("char", CONTROL.values(), ids=CONTROL)
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry_run", "submit"])
def test_a_control_character_in_output_dir_never_reaches_the_script(
    tmp_path, monkeypatch, char, dry_run
):
    """`--output-dir $'outputs/x\\ntouch PWNED'` wrote `touch PWNED` as a line of the job
    script; it is refused, before anything is written (submit: before the run is claimed)."""
    monkeypatch.chdir(tmp_path)
    argv = [*CPU_JOB, "--output-dir", f"outputs/x{char}touch PWNED"]
    config, _ = parse_config(
        RLConfig, "rl", argv, sections=("trainer", "orchestrator", "inference")
    )
    plan = build_plan(config, dry_run=dry_run)
    with_sbatch(monkeypatch)
    with pytest.raises(ConfigError) as err:
        if dry_run:
            slurm.job_script(plan, plan.run.config_file("rl"))
        else:
            slurm.submit(plan, lambda plan: None)
    message = str(err.value)
    assert "output_dir" in message and "control character" in message, message
    assert repr(char)[1:-1] in message and "\n" not in message, message
    assert list(tmp_path.iterdir()) == []


def test_a_bad_template_is_refused_before_submit_writes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t").mkdir()
    template = tmp_path / "t" / "job.tmpl"
    template.write_text("#!/bin/bash\necho ${HOME}\n{command}\n")
    argv = [*CPU_JOB, "--slurm.template", str(template), "--output-dir", "run"]
    config, _ = parse_config(
        RLConfig, "rl", argv, sections=("trainer", "orchestrator", "inference")
    )
    plan = build_plan(config, dry_run=False)
    with_sbatch(monkeypatch)
    with pytest.raises(ConfigError, match="cannot fill it in"):
        slurm.submit(plan, lambda plan: None)
    assert [p.name for p in tmp_path.iterdir()] == ["t"]
