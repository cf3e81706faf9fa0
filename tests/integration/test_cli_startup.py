"""Start-up cost of the light entry points, in fresh interpreters: `rl --help` and the
foundation package import neither torch nor vLLM."""

import subprocess
import sys
import time

import pytest

from tests.integration.helpers import REPO

pytestmark = pytest.mark.integration


def test_rl_help_is_fast_and_imports_no_torch():
    code = (
        "import sys; from launcher.rl import main\ntry: main(['--help'])\nexcept SystemExit: pass\n"
    )
    code += "assert 'torch' not in sys.modules and 'vllm' not in sys.modules"
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert "--trainer.optim.lr" in result.stdout
    assert time.monotonic() - started < 10  # generous: CI machines are shared


def test_foundation_imports_no_heavy_library_and_no_role():
    modules = "cli config entry errors files health logs metrics models protocol rundir"
    modules += " schema toml_io weight_transfer"
    code = "import sys\n" + "".join(f"import rlcore.{m}\n" for m in modules.split())
    code += "heavy = {'torch', 'vllm', 'verifiers', 'transformers', 'numpy'} & set(sys.modules)\n"
    code += "roles = [m for m in sys.modules if m.split('.')[0] in "
    code += "('trainer', 'orchestrator', 'inference', 'launcher')]\n"
    code += "assert not heavy and not roles, (heavy, roles)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
