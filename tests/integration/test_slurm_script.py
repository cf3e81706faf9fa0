"""The SLURM job script of a dry run parses as bash (`bash -n`)."""

import subprocess

import pytest

from launcher import slurm
from launcher.prepare import build_plan
from launcher.rl_config import RLConfig
from tests.unit.launcher.test_slurm_job import GPU_RUN

pytestmark = pytest.mark.integration


def test_dry_run_script_is_valid_bash(tmp_path):
    plan = build_plan(RLConfig.model_validate(GPU_RUN), dry_run=True)
    script = tmp_path / "job.sbatch"
    script.write_text(slurm.job_script(plan, plan.run.config_file("rl")))
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
