"""The `[slurm]` options a cluster user sets: each reaches the job script, and a bad one is one
message naming the flag, the value and the fix (exit 2), before anything is written."""

import pytest

from launcher import slurm
from launcher.prepare import build_plan
from launcher.rl_config import RLConfig
from rlcore.entry import parse_config
from rlcore.errors import ConfigError

CPU_JOB = ["--slurm.nodes", "3", "--slurm.trainer-nodes", "2", "--slurm.gpus-per-node", "0"]


def script_for(tmp_path, *argv: str) -> str:
    config, _ = parse_config(RLConfig, "rl", [*CPU_JOB, "--output-dir", str(tmp_path / "run"),
                                           *argv], sections=("trainer", "orchestrator",
                                                             "inference"))  # fmt: skip
    plan = build_plan(config, dry_run=True)
    return slurm.job_script(plan, plan.run.config_file("rl"))


def test_every_option_reaches_the_script(tmp_path):
    script = script_for(
        tmp_path, "--slurm.partition", "cpu", "--slurm.account", "lab", "--slurm.time",
        "2-00:00:00", "--slurm.sbatch-lines", '["--qos=high", "--mem=0"]', "--slurm.setup",
        '["module load cuda", "source .venv/bin/activate"]', "--slurm.job-name", "mine",
    )  # fmt: skip
    lines = script.splitlines()
    for line in ("#SBATCH --partition=cpu", "#SBATCH --account=lab", "#SBATCH --time=2-00:00:00",
                 "#SBATCH --qos=high", "#SBATCH --mem=0", "#SBATCH --job-name=mine",
                 "module load cuda", "source .venv/bin/activate"):  # fmt: skip
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
        (["--slurm.sbatch-lines", '["qos=high"]'],
         ["slurm.sbatch_lines[0] = 'qos=high'", "e.g. '--qos=high'"]),
        (["--slurm.sbatch-lines", '["--qos=high\\nrm -rf x"]'], ["one option per entry"]),
        (["--slurm.sbatch-lines", '["--mem=0", "--time=01:00:00"]'],
         ["slurm.sbatch_lines[1]", "already writes --time", "set slurm.time instead"]),
        (["--slurm.sbatch-lines", '["-o /tmp/x.log"]'], ["already writes -o", "drop it"]),
    ],
)  # fmt: skip
def test_a_bad_option_is_exit_2_naming_flag_value_and_fix(capsys, argv, words):
    with pytest.raises(SystemExit) as exc:
        parse_config(RLConfig, "rl", [*CPU_JOB, *argv], sections=("trainer",))
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err, err
    for word in words:
        assert word in err, err


@pytest.mark.parametrize("time", ["90", "30:00", "24:00:00", "2-12", "2-12:30", "UNLIMITED"])
def test_slurms_time_forms_are_accepted(time):
    assert RLConfig.model_validate({"slurm": {"time": time}}).slurm.time == time


def test_a_template_with_an_unknown_placeholder_is_a_config_error(tmp_path):
    template = tmp_path / "job.tmpl"
    template.write_text("#!/bin/bash\n#SBATCH -N {nodes}\necho ${HOME}\n{command}\n")
    with pytest.raises(ConfigError, match=r"slurm.template .*job.tmpl.*\$\{\{HOME\}\}"):
        script_for(tmp_path, "--slurm.template", str(template))
    template.write_text("#!/bin/bash\n#SBATCH -N {nodes}\necho ${{HOME}}\n{command}\n")
    assert "echo ${HOME}" in script_for(tmp_path, "--slurm.template", str(template))
