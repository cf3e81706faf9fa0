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
    """Every module of rlcore, found by walking the package (a module added or moved is
    checked too), imports no heavy library and no role."""
    code = "import importlib, pkgutil, sys\nimport rlcore\n"
    code += "found = [m.name for m in pkgutil.walk_packages(rlcore.__path__, 'rlcore.')]\n"
    code += "for name in found:\n    importlib.import_module(name)\n"
    code += "assert {'rlcore.config.cli', 'rlcore.runs.rundir'} <= set(found)\n"
    code += "heavy = {'torch', 'vllm', 'verifiers', 'transformers', 'numpy'} & set(sys.modules)\n"
    code += "roles = [m for m in sys.modules if m.split('.')[0] in "
    code += "('trainer', 'orchestrator', 'inference', 'launcher')]\n"
    code += "assert not heavy and not roles, (heavy, roles)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("quick_start", [True, False], ids=["quick-start", "mcp-tasks"])
def test_rl_checks_a_run_without_the_environments_libraries(tmp_path, quick_start):
    """`rl` stays up for the whole run: its checks (a dry run does them all) import neither
    torch nor verifiers, datasets or the OpenAI client, also where the run's tasks file is
    checked through rl_tasks (that import cost the launcher ~5 s and 0.15 GiB)."""
    argv = [
        "--trainer",
        "@",
        "configs/quickstart/train.toml",
        "--orchestrator",
        "@",
        "configs/quickstart/orch.toml",
        "--inference",
        "@",
        "configs/quickstart/infer.toml",
        "--output-dir",
        str(tmp_path / "run"),
        "--dry-run",
    ]
    if not quick_start:
        tasks = tmp_path / "tasks.json"
        tasks.write_text(
            '[{"id": "t", "prompt": "say hi", "mcp_config": {"s": {"url": '
            '"http://127.0.0.1:9/mcp"}}, "setup_tool": null, '
            '"evaluate_tool": {"name": "check", "arguments": {}}}]'
        )
        argv += ["--orchestrator.env", f'[{{id = "rl-tasks", args = {{tasks = "{tasks}"}}}}]']
    code = f"import sys\nfrom launcher.rl import main\ntry: main({argv!r})\nexcept SystemExit as e:"
    code += " assert not e.code, e.code\n"
    code += "heavy = {'torch', 'verifiers', 'datasets', 'openai'} & set(sys.modules)\n"
    code += "assert not heavy, heavy\n"
    code += "assert 'rl_tasks.taskfile' in sys.modules or " + str(quick_start)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
