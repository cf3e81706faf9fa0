"""The machine probe (rlcore/host/machine.py): ISA levels from /proc/cpuinfo's flags, the caps of
oneDNN's and ATen's environment variables, and the dtypes `auto` chooses from them. The
expected levels come from the vendors' feature lists, not from the probe."""

import pytest

from rlcore.host.machine import (
    AVX2_ENV,
    DTYPE_BYTES,
    bf16_matmul_refusal,
    compute_dtype,
    probe,
    read_machine,
    slow_bf16_warning,
)

BASE = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c"
ZEN3 = f"{BASE} avx2 fma bmi2"  # AMD EPYC 7003: AVX2, no AVX-512
SKYLAKE_SP = f"{ZEN3} avx512f avx512bw avx512vl avx512dq avx512cd"  # AVX-512, no bf16
ZEN4 = f"{SKYLAKE_SP} avx512_bf16 avx512_vnni"  # AMD EPYC 9004
SAPPHIRE_RAPIDS = f"{ZEN4} amx_bf16 amx_tile amx_int8"


def machine(flags: str, env: dict | None = None, arch: str = "x86_64"):
    text = f"processor\t: 0\nvendor_id\t: Test\nmodel name\t: Test CPU\nflags\t\t: {flags}\n\n"
    return read_machine(text, env or {}, arch)


@pytest.mark.parametrize(
    ("flags", "isa", "works", "native"),
    [
        (BASE, "baseline", False, False),
        (ZEN3, "avx2", False, False),
        (SKYLAKE_SP, "avx512", True, False),
        (ZEN4, "avx512_bf16", True, True),
        (SAPPHIRE_RAPIDS, "amx", True, True),
        (f"{ZEN3} avx_ne_convert", "avx2", True, False),  # AVX2 with bf16 conversions
    ],
)
def test_levels_from_the_flags(flags, isa, works, native):
    found = machine(flags)
    assert (found.isa, found.bf16_matmul, found.bf16_native) == (isa, works, native)
    assert found.capped_by == "" and found.hardware_isa == isa


@pytest.mark.parametrize(
    ("env", "isa", "works", "native"),
    [
        (AVX2_ENV, "avx2", False, False),
        ({"ONEDNN_MAX_CPU_ISA": "avx2"}, "avx2", False, False),  # case does not matter
        ({"DNNL_MAX_CPU_ISA": "AVX512_CORE"}, "avx512", True, False),
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, "avx512_bf16", True, True),
        ({"ATEN_CPU_CAPABILITY": "avx2"}, "avx2", True, True),  # oneDNN's bf16 is untouched
        ({"ONEDNN_MAX_CPU_ISA": "ALL", "ATEN_CPU_CAPABILITY": "avx512"}, "amx", True, True),
        ({"ONEDNN_MAX_CPU_ISA": "nonsense"}, "amx", True, True),
    ],
)
def test_caps_lower_the_level_and_say_so(env, isa, works, native):
    found = machine(SAPPHIRE_RAPIDS, env)
    assert (found.isa, found.bf16_matmul, found.bf16_native) == (isa, works, native)
    assert found.hardware_isa == "amx"
    assert bool(found.capped_by) == (isa != "amx")
    caps = [n for n in env if n.endswith(("_ISA", "_CAPABILITY")) and isa != "amx"]
    assert all(name in found.capped_by for name in caps)
    if found.capped_by:
        assert "capped by" in found.describe()


def test_a_cap_never_raises_the_level():
    assert machine(ZEN3, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}).isa == "avx2"


def test_arm_with_and_without_bf16():
    assert machine("fp asimd bf16 sve", arch="aarch64").bf16_native
    assert not machine("fp asimd", arch="aarch64").bf16_matmul


@pytest.mark.parametrize(
    ("requested", "on_gpu", "flags", "chosen"),
    [
        ("auto", True, ZEN3, "bfloat16"),
        ("auto", False, ZEN3, "float32"),
        ("auto", False, SKYLAKE_SP, "float32"),  # bf16 emulated: no faster than fp32
        ("auto", False, ZEN4, "bfloat16"),
        ("auto", False, SAPPHIRE_RAPIDS, "bfloat16"),
        ("bfloat16", False, ZEN3, "bfloat16"),  # honoured (with a warning)
        ("float32", False, ZEN4, "float32"),
    ],
)
def test_auto_is_bf16_where_native_and_fp32_elsewhere(requested, on_gpu, flags, chosen):
    dtype, why = compute_dtype(requested, on_gpu, machine(flags))
    assert dtype == chosen and why


def test_explicit_bf16_on_avx2_is_warned_about_once_and_native_is_not():
    warning = slow_bf16_warning("trainer.model.dtype", "bfloat16", machine(ZEN3))
    assert "trainer.model.dtype = auto" in warning and "4x slower" in warning
    assert "\n" not in warning
    assert slow_bf16_warning("trainer.model.dtype", "bfloat16", machine(ZEN4)) is None
    assert slow_bf16_warning("trainer.model.dtype", "float32", machine(ZEN3)) is None


def test_bf16_linear_layers_are_refused_where_onednn_has_none():
    refusal = bf16_matmul_refusal("inference.cpu.matmul_dtype", machine(ZEN3))
    assert "inference.cpu.matmul_dtype = auto" in refusal
    assert bf16_matmul_refusal("x", machine(SKYLAKE_SP)) is None


def test_the_probe_agrees_with_torch_in_this_process():
    """What torch's oneDNN says of bf16 here, against the probe's answer from the flags."""
    import torch

    found = probe()
    if found.arch != "x86_64":
        pytest.skip("the oneDNN bf16 check is x86's")
    assert torch.ops.mkldnn._is_mkldnn_bf16_supported() == found.bf16_matmul
    aten = torch.backends.cpu.get_cpu_capability()  # ATen's own level: AVX2, AVX512, ...
    assert (aten == "AVX2") == (found.isa == "avx2") or found.capped_by


@pytest.mark.parametrize(
    ("flags", "served", "matmul", "on_gpu", "trainer", "want"),
    [
        (ZEN4, "auto", "auto", False, None, ("float32", "bfloat16")),  # inference alone
        (ZEN3, "auto", "auto", False, None, ("float32", "model")),
        (SKYLAKE_SP, "auto", "auto", False, None, ("float32", "model")),  # emulated: not faster
        (SKYLAKE_SP, "auto", "auto", False, "bfloat16", ("float32", "bfloat16")),  # as trained
        (ZEN3, "auto", "auto", False, "bfloat16", ("float32", "model")),  # cannot be built
        (ZEN4, "auto", "auto", False, "float32", ("float32", "model")),
        (ZEN4, "bfloat16", "auto", False, None, ("bfloat16", "model")),
        (ZEN3, "float32", "bfloat16", False, None, ("float32", "bfloat16")),  # stands (refused)
        (ZEN3, "auto", "auto", True, None, ("bfloat16", "auto")),  # GPU: no CPU layers
    ],
)
def test_serving_dtypes(flags, served, matmul, on_gpu, trainer, want):
    from rlcore.host.machine import serving_dtypes

    assert serving_dtypes(served, matmul, on_gpu, machine(flags), trainer) == want


def test_gpus_are_read_from_the_drivers_entries(tmp_path, monkeypatch):
    from rlcore.host.machine import gpus

    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text("Model: \t NVIDIA H100 80GB HBM3\nIRQ: 1\n")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpus(tmp_path) == (2, "NVIDIA H100 80GB HBM3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpus(tmp_path)[0] == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpus(tmp_path) == (0, "")
    assert gpus(tmp_path / "none") == (0, "")


def test_the_dtype_table_agrees_with_torch():
    import torch

    for name, size in DTYPE_BYTES.items():  # torch spells vLLM's `half` and `float` too
        dtype = getattr(torch, name)
        assert isinstance(dtype, torch.dtype) and dtype.itemsize == size, name
