"""The machine, probed once: CPU vendor and model, the x86 ISA level this process may use,
whether oneDNN has a bf16 matmul here and whether it is native (fast), CPUs, memory, GPUs; and
the compute dtypes chosen from that answer. Every process and `rl --dry-run` call `probe()`, so
they agree, and it imports neither torch nor vLLM (the launcher and `--help` stay light).

What decides bf16 on a CPU (measured; the numbers are in benchmarks/README.md):
- oneDNN builds a bf16 x bf16 matmul only from AVX-512 core (AVX512F/BW/VL/DQ) up, or with
  AVX-NE-CONVERT; on plain AVX2 it refuses ("could not create a primitive descriptor"), so
  vLLM's bf16 linear layers cannot be built and torch's bf16 products fall back to a generic
  gemm, about 4x slower than fp32 (a 512 x 576 x 1536 product: 43 ms against 10).
- It is native, faster than fp32, with AVX512_BF16 or AMX: 2.4 ms against 7.6 on an EPYC
  with AVX512_BF16. On AVX-512 without AVX512_BF16 oneDNN emulates it: it works, but is no
  faster than fp32.
- `ONEDNN_MAX_CPU_ISA` (oneDNN, also spelt DNNL_MAX_CPU_ISA) and `ATEN_CPU_CAPABILITY` (torch's
  own kernels) cap a process's ISA below the hardware's; the probe honours both, and the
  inference server makes vLLM load its AVX2 kernels under such a cap (inference/vllm_plugin.py),
  so `AVX2_ENV` gives an AVX2 machine's paths on any x86 CPU (tests/unit/rlcore/test_machine.py).

`auto` dtypes mean "the fastest that is exact enough here": bf16 on a GPU and where bf16 is
native on the CPU, fp32 elsewhere (`compute_dtype`)."""

import functools
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

LEVELS = ("baseline", "avx2", "avx512", "avx512_bf16", "amx")
"""x86 ISA levels that change what runs fast, lowest first."""
AVX2_ENV = {
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}
"""Environment that gives a process an AVX2-only machine's kernels on any x86 CPU (oneDNN,
ATen, MKL; vLLM through the probe)."""
ONEDNN_CAPS = {
    "SSE41": "baseline",
    "AVX": "baseline",
    "AVX2": "avx2",
    "AVX2_VNNI": "avx2",
    "AVX2_VNNI_2": "avx2",
    "AVX512_CORE": "avx512",
    "AVX512_CORE_VNNI": "avx512",
    "AVX512_CORE_BF16": "avx512_bf16",
    "AVX10_1_512": "avx512_bf16",
    "AVX512_CORE_FP16": "avx512_bf16",
    "AVX512_CORE_AMX": "amx",
    "AVX512_CORE_AMX_FP16": "amx",
    "AVX10_1_512_AMX": "amx",
    "AVX10_1_512_AMX_FP16": "amx",
    "AVX10_2_512": "amx",
    "AVX10_2_512_AMX_2": "amx",
    "ALL": "amx",
    "DEFAULT": "amx",
}
ATEN_CAPS = {"default": "baseline", "avx2": "avx2", "avx512": "amx"}
"""ATen's capability names; `avx512` caps nothing we distinguish (its bf16 goes by oneDNN)."""
AVX512_CORE = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
Dtype = Literal["bfloat16", "float16", "float32"]
"""A dtype a process computes or serves in, as configs name it (`auto` resolved)."""
MatmulDtype = Literal["auto", "model", "bfloat16"]
"""What inference's CPU linear layers compute in (`inference.cpu.matmul_dtype`)."""
GPU_DTYPE: Dtype = "bfloat16"
DTYPE_BYTES = {
    "float64": 8,
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "int64": 8,
    "int32": 4,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}
"""Bytes per element of each dtype, by its name as a config, torch (`str(dtype)` less `torch.`)
or vLLM (`half`, `float`) spells it: the one table every size, estimate and transfer reads."""


@dataclass(frozen=True)
class Machine:
    arch: str
    vendor: str
    model: str
    isa: str
    """The x86 level this process's kernels use (LEVELS), caps included; the architecture's
    name elsewhere (aarch64)."""
    hardware_isa: str
    """The level the CPU itself has."""
    capped_by: str
    """The environment variable(s) that lowered `isa`, '' when none."""
    bf16_matmul: bool
    """oneDNN builds a bf16 x bf16 matmul in this process."""
    bf16_native: bool
    """bf16 products run in hardware, faster than fp32 (AVX512_BF16 or AMX)."""
    num_cpus: int
    """CPUs this process may run on (its affinity)."""
    memory_gib: float
    num_gpus: int
    gpu_name: str
    compiler: str = ""
    """The C++ compiler torch.compile would build with (`CXX`, else g++); '' when there is
    none."""

    def describe(self) -> str:
        """One line: CPU, ISA, bf16, CPUs, memory, GPUs."""
        isa = self.isa.upper().replace("_BF16", "+BF16")
        if self.capped_by:
            isa += f" (capped by {self.capped_by}; the CPU has {self.hardware_isa.upper()})"
        bf16 = "native" if self.bf16_native else "emulated" if self.bf16_matmul else "none"
        gpus = f"{self.num_gpus} x {self.gpu_name}" if self.num_gpus else "no GPU"
        return (
            f"{self.model or self.vendor or self.arch}, {isa}, bf16 matmul {bf16}, "
            f"{self.num_cpus} CPUs, {self.memory_gib:.0f} GiB, {gpus}"
        )

    def record(self) -> dict:
        """What run.json keeps, to compare a resumed run's machine with."""
        return asdict(self)


def cpu_info(text: str) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def hardware_level(flags: set[str]) -> str:
    if {"amx_bf16", "amx_tile"} <= flags and AVX512_CORE <= flags:
        return "amx"
    if "avx512_bf16" in flags and AVX512_CORE <= flags:
        return "avx512_bf16"
    if AVX512_CORE <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "baseline"


CAPS = (
    ("ONEDNN_MAX_CPU_ISA", ONEDNN_CAPS, str.upper),
    ("DNNL_MAX_CPU_ISA", ONEDNN_CAPS, str.upper),
    ("ATEN_CPU_CAPABILITY", ATEN_CAPS, str.lower),
)


def capped(level: str, env: dict[str, str], names: tuple[str, ...]) -> tuple[str, list[str]]:
    """`level` lowered by the caps `names` set in `env`; the settings that lowered it."""
    by, lowest = [], level
    for name, table, normal in CAPS:
        cap = table.get(normal(env.get(name, "").strip())) if name in names else None
        if cap is not None and LEVELS.index(cap) < LEVELS.index(level):
            lowest = min(lowest, cap, key=LEVELS.index)
            by.append(f"{name}={env[name]}")
    return lowest, by


def x86_facts(flags: set[str], env: dict[str, str]) -> dict:
    hardware = hardware_level(flags)
    onednn, _ = capped(hardware, env, ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"))
    isa, by = capped(hardware, env, tuple(name for name, _, _ in CAPS))
    ne_convert = "avx_ne_convert" in flags and onednn == "avx2"
    return {
        "isa": isa,
        "hardware_isa": hardware,
        "capped_by": ", ".join(by),
        "bf16_matmul": LEVELS.index(onednn) >= LEVELS.index("avx512") or ne_convert,
        "bf16_native": LEVELS.index(onednn) >= LEVELS.index("avx512_bf16"),
    }


def arm_facts(flags: set[str]) -> dict:
    native = "bf16" in flags  # Armv8.6 BF16 (Graviton3, Apple M2 and later)
    return {
        "isa": "aarch64",
        "hardware_isa": "aarch64",
        "capped_by": "",
        "bf16_matmul": native,
        "bf16_native": native,
    }


NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def gpus(root: Path = NVIDIA_GPUS) -> tuple[int, str]:
    """Visible NVIDIA GPUs and the first one's model, from the driver's /proc entries (one
    folder per GPU; no subprocess, no CUDA): CUDA_VISIBLE_DEVICES narrows the count."""
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return 0, ""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = len(folders)
    if visible is not None:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    name = ""
    if count:
        try:
            info = (folders[0] / "information").read_text()
        except OSError:
            info = ""
        name = next(
            (
                line.split(":", 1)[1].strip()
                for line in info.splitlines()
                if line.startswith("Model:")
            ),
            "",
        )
    return count, name


def find_compiler(env: dict[str, str], system: str = "Linux") -> str:
    """The path of the C++ compiler torch.compile's inductor would use: `CXX`, else g++
    (clang++ on macOS), as inductor looks it up; '' when it is not there."""
    import shutil

    default = "clang++" if system == "Darwin" else "g++"
    return shutil.which(env.get("CXX") or default, path=env.get("PATH")) or ""


def read_machine(cpuinfo: str, env: dict[str, str], arch: str) -> Machine:
    """The facts from /proc/cpuinfo's text and the environment (pure: tests feed their own)."""
    import psutil

    info = cpu_info(cpuinfo)
    flags = set((info.get("flags") or info.get("Features") or "").split())
    facts = arm_facts(flags) if arch in ("aarch64", "arm64") else x86_facts(flags, env)
    num_gpus, gpu_name = gpus()
    return Machine(
        arch=arch,
        vendor=info.get("vendor_id", ""),
        model=info.get("model name", ""),
        num_cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1,
        memory_gib=psutil.virtual_memory().total / 2**30,
        num_gpus=num_gpus,
        gpu_name=gpu_name,
        compiler=find_compiler(env, platform.system()),
        **facts,
    )


@functools.cache
def probe() -> Machine:
    """This process's machine, read once."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    return read_machine(text, dict(os.environ), platform.machine())


def compute_dtype(
    requested: Dtype | Literal["auto"], on_gpu: bool, machine: Machine
) -> tuple[Dtype, str]:
    """(dtype, why) for a compute dtype of `requested` (`auto` or a dtype's name)."""
    if requested != "auto":
        return requested, "set in the config"
    if on_gpu:
        return GPU_DTYPE, "auto: on a GPU"
    if machine.bf16_native:
        return "bfloat16", f"auto: bf16 is native on this CPU ({machine.isa})"
    return "float32", f"auto: no native bf16 on this CPU ({machine.isa}), fp32 is faster"


def serving_dtypes(
    model_dtype: Dtype | Literal["auto"],
    matmul_dtype: MatmulDtype,
    on_gpu: bool,
    machine: Machine,
    trainer_dtype: str | None = None,
) -> tuple[Dtype, MatmulDtype]:
    """(served dtype, CPU linear layers' dtype) for inference's `model.dtype` and
    `cpu.matmul_dtype`: `auto` serves bf16 on a GPU and fp32 on a CPU (the trainer's fp32
    master weights arrive whole), whose linear layers compute in bf16 where the trainer does
    (`trainer_dtype`, under `rl`) and oneDNN can, or alone where bf16 is native."""
    served = model_dtype if model_dtype != "auto" else GPU_DTYPE if on_gpu else "float32"
    if on_gpu or matmul_dtype != "auto":
        return served, matmul_dtype
    if trainer_dtype is not None:
        bf16 = trainer_dtype == "bfloat16" and machine.bf16_matmul
    else:
        bf16 = machine.bf16_native
    return served, "bfloat16" if bf16 and served == "float32" else "model"


def slow_bf16_warning(key: str, dtype: str, machine: Machine) -> str | None:
    """The one-line warning for an explicit bf16 compute dtype on a CPU without native bf16."""
    if dtype != "bfloat16" or machine.bf16_native:
        return None
    how = (
        "are emulated, no faster than fp32"
        if machine.bf16_matmul
        else "run on a generic fallback, about 4x slower than fp32"
    )
    return (
        f"{key} = bfloat16 on a CPU without native bf16 ({machine.isa}): bf16 products {how} "
        f"here; set {key} = auto (float32 on this machine) for speed"
    )


def bf16_matmul_refusal(key: str, machine: Machine) -> str | None:
    """Why bf16 linear layers cannot be built here, or None when they can."""
    if machine.bf16_matmul:
        return None
    return (
        f"{key} = bfloat16 needs a oneDNN bf16 matmul, which this CPU ({machine.isa}, no "
        f"AVX-512) does not have: set {key} = auto (float32 products here) or model"
    )
