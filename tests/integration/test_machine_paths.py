"""The AVX2 path on any x86 machine (rlcore.host.machine.AVX2_ENV caps oneDNN, ATen and MKL to
AVX2, and the inference server makes vLLM load its AVX2 kernels): what a process really runs
there, the dtypes `auto` picks, the warning for an explicit bf16 and the refusal of bf16 linear
layers oneDNN cannot build, before anything starts."""

import os
import subprocess
import sys

import pytest

from rlcore.host.machine import AVX2_ENV, probe
from tests.integration.helpers import REPO, avx2_said, free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(probe().arch != "x86_64", reason="the ISA caps are x86's"),
]
QUICKSTART = [
    f"--{c} @ configs/quickstart/{f}.toml"
    for c, f in (("trainer", "train"), ("orchestrator", "orch"), ("inference", "infer"))
]


def run(args: list[str], env: dict | None = None, timeout_s: float = 300):
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
    )


def rl_dry_run(*flags: str, env: dict | None = None):
    args = ["-m", "launcher.rl", *" ".join(QUICKSTART).split(), "--dry-run", *flags]
    return run([*args, "--output-dir", "outputs/machine-paths-dry-run"], env)


AVX2_PROCESS = """
import json, torch
from inference.server import steer_vllm_kernels
from inference.cpu_matmul import check_bf16
from rlcore.host.machine import probe
steer_vllm_kernels(probe())
import vllm._custom_ops
maps = open("/proc/self/maps").read()
print(json.dumps({
    "isa": probe().isa, "aten": torch.backends.cpu.get_cpu_capability(),
    "mkldnn_bf16": torch.ops.mkldnn._is_mkldnn_bf16_supported(),
    "vllm_avx2_kernels": "_C_AVX2" in maps, "bf16_refused": check_bf16(),
}))
"""


def test_the_avx2_environment_really_takes_the_avx2_path():
    result = run(["-c", AVX2_PROCESS], AVX2_ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    import json

    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["isa"] == "avx2" and facts["aten"] == "AVX2"
    assert facts["mkldnn_bf16"] is False  # oneDNN's own answer, not the probe's
    assert facts["vllm_avx2_kernels"] is True
    assert "cpu.matmul_dtype = auto" in facts["bf16_refused"]


def test_dry_run_names_the_cpu_and_picks_fp32_on_avx2():
    result = rl_dry_run(env=AVX2_ENV)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Machine: " in result.stdout and avx2_said() in result.stdout, result.stdout
    assert "trainer.model.dtype = float32 (auto: no native bf16" in result.stdout
    assert "inference.model.dtype = float32, cpu.matmul_dtype = model" in result.stdout
    assert "warning" not in result.stderr


@pytest.mark.skipif(not probe().bf16_native, reason="this CPU has no native bf16")
def test_dry_run_picks_bf16_where_it_is_native():
    result = rl_dry_run()
    assert result.returncode == 0, result.stderr[-2000:]
    assert "trainer.model.dtype = bfloat16 (auto: bf16 is native" in result.stdout
    assert "cpu.matmul_dtype = bfloat16" in result.stdout


def test_an_explicit_bf16_trainer_on_avx2_is_kept_with_one_warning():
    result = rl_dry_run("--trainer.model.dtype", "bfloat16", env=AVX2_ENV)
    assert result.returncode == 0, result.stderr[-2000:]
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "trainer.model.dtype = bfloat16" in warnings[0]
    assert "4x slower" in warnings[0] and "trainer.model.dtype = auto" in warnings[0]
    assert "trainer.model.dtype = bfloat16 (set in the config)" in result.stdout
    assert "cpu.matmul_dtype = model" in result.stdout  # bf16 products cannot be built here


def test_bf16_linear_layers_on_avx2_are_refused_by_rl_before_anything_starts():
    result = rl_dry_run("--inference.cpu.matmul-dtype", "bfloat16", env=AVX2_ENV)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "inference.cpu.matmul_dtype = bfloat16" in result.stderr
    assert "set inference.cpu.matmul_dtype = auto" in result.stderr


def test_bf16_linear_layers_on_avx2_are_refused_by_inference_alone(tmp_path, tiny_model_dir):
    out = tmp_path / "run"
    result = run(
        [
            "-m",
            "inference.main",
            "--model.name",
            str(tiny_model_dir),
            "--model.dtype",
            "float32",
            "--cpu.matmul-dtype",
            "bfloat16",
            "--server.port",
            str(free_port()),
            "--output-dir",
            str(out),
        ],
        AVX2_ENV,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("inference: error")]
    assert len(errors) == 1 and "cpu.matmul_dtype = bfloat16" in errors[0]
    assert not out.exists()  # refused before anything was written
