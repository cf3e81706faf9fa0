"""What the launchers print of an estimate and the parts of a job every entry point reads the
same way: the block's lines, the shared machine's slowdown, the measured speed (or why there is
none), the checkpoints a run keeps, LoRA's adapters, an environment's turns, and the whole
estimate of an SFT run (`rl sft` and `sft` alone print it). Configs are read by their fields
only (no role's schema imported); never raises where it says so."""

import ast
import importlib.util
import os
from dataclasses import replace
from pathlib import Path

from rlcore.config.base import CPU_BLOCK_TOKENS, GPU_BLOCK_TOKENS
from rlcore.errors import ConfigError
from rlcore.forecast import contention
from rlcore.forecast.calibrate import CALIBRATION_ENV, CalibrationError, keep, speeds
from rlcore.forecast.model import GIB, TRAINER_RESIDENT, Forecast, Job, estimate
from rlcore.forecast.progress import duration
from rlcore.forecast.shape import ModelShape, shape_of
from rlcore.host.machine import DTYPE_BYTES
from rlcore.host.models import cache_dir


def environment_turns(env_id: str, args: dict) -> int:
    """An environment's most turns: its `max_turns` argument, else the default of its
    `load_environment(max_turns=...)` read from the installed source (never imported), else 1."""
    if isinstance(args.get("max_turns"), int):
        return max(args["max_turns"], 1)
    try:
        spec = importlib.util.find_spec(env_id.replace("-", "_"))
        origin = spec.origin if spec else None
        tree = ast.parse(Path(origin).read_text()) if origin else None
    except (ImportError, ValueError, OSError, SyntaxError):
        return 1
    for node in ast.walk(tree) if tree else []:
        if isinstance(node, ast.FunctionDef) and node.name == "load_environment":
            names = [a.arg for a in node.args.args]
            tail = names[len(names) - len(node.args.defaults) :]
            defaults = dict(zip(tail, node.args.defaults, strict=True))
            value = defaults.get("max_turns")
            if isinstance(value, ast.Constant) and isinstance(value.value, int):
                return max(value.value, 1)
    return 1


def checkpoint_counts(ckpt, max_steps: int) -> tuple[int, int]:
    """(checkpoints saved, kept at the end) under the `ckpt` rules (every `interval` steps and
    after the last; `keep` of them)."""
    if not ckpt.enabled:
        return 0, 0
    saved = max_steps // ckpt.interval if ckpt.interval else 0
    saved += 0 if ckpt.interval and max_steps % ckpt.interval == 0 else 1
    return saved, min(saved, ckpt.keep) if ckpt.keep is not None else saved


def lora_trainable(lora, shape: ModelShape) -> int | None:
    """Adapter parameters: rank x (inputs + outputs) of each target matrix in each layer."""
    if lora is None:
        return None
    heads = shape.heads or max(shape.hidden // 64, 1)
    head_dim = shape.head_dim or shape.hidden // heads
    attention, kv = heads * head_dim, (shape.kv_heads or heads) * head_dim
    mlp = shape.intermediate or 4 * shape.hidden
    sides = {
        "q_proj": (shape.hidden, attention),
        "k_proj": (shape.hidden, kv),
        "v_proj": (shape.hidden, kv),
        "o_proj": (attention, shape.hidden),
        "gate_proj": (shape.hidden, mlp),
        "up_proj": (shape.hidden, mlp),
        "down_proj": (mlp, shape.hidden),
    }
    per_layer = sum(sum(sides.get(t, (shape.hidden, shape.hidden))) for t in lora.target_modules)
    return lora.rank * per_layer * shape.layers


def block_tokens(vllm_args: dict, on_gpu: bool) -> int:
    """inference's KV-cache block: `vllm_args.block_size`, else vLLM's default."""
    given = vllm_args.get("block_size", vllm_args.get("block-size"))
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return given
    return GPU_BLOCK_TOKENS if on_gpu else CPU_BLOCK_TOKENS


def side_files_bytes(name: str) -> float:
    """Bytes of a model folder's files besides its weights (tokenizer, configs), which every
    policy folder repeats; the model's default where there is no folder yet."""
    from rlcore.forecast.model import TOKENIZER_BYTES
    from rlcore.host.models import model_folder

    try:
        folder = model_folder(name)
        if folder is None:
            return TOKENIZER_BYTES
        files = [f for f in folder.iterdir() if f.is_file() and f.suffix != ".safetensors"]
        return float(sum(f.stat().st_size for f in files)) or TOKENIZER_BYTES
    except (ConfigError, OSError, AttributeError):
        return TOKENIZER_BYTES


def measured_speeds(machine, dtypes: list[str], device: str = "cpu"):
    """This machine's speeds on `device` (cached per fingerprint), or (None, why). A CPU's are
    measured in fp32 too: its training attention runs at the fp32 rate in any dtype
    (rlcore.forecast.model.cpu_train_compute_s)."""
    import os

    if os.environ.get(CALIBRATION_ENV, "").lower() == "off":
        return None, f"the speed measurement is off: {CALIBRATION_ENV}=off"
    if device == "cpu":
        dtypes = sorted({*dtypes, "float32"})
    try:
        return speeds(machine.record(), dtypes, device), ""
    except CalibrationError as err:
        return None, str(err)


def shared(machine) -> tuple[float, list[str]]:
    """(the slowdown other programs cause now, the basis line saying so when they do): the
    1-minute load average, at most the threads runnable now (`runnable_now`: a program that has
    just ended, such as the run before, still counts in the average)."""
    import os

    from rlcore.forecast.calibrate import runnable_now
    from rlcore.forecast.model import shared_slowdown

    try:
        average = os.getloadavg()[0]
    except OSError:
        return 1.0, []
    now = runnable_now()
    load = average if now is None else min(average, now)
    cpus = machine.num_cpus if machine else os.cpu_count() or 1
    slowdown = shared_slowdown(load, cpus)
    if slowdown < 1.1:
        return 1.0, []
    how = "load average" if now is None or average <= now else "runnable now"
    return slowdown, [
        f"this machine is shared: other programs keep {load:.1f} threads busy on {cpus} CPUs "
        f"({how}), CPU times stretched {slowdown:.1f}x"
    ]


def keep_measurement(forecast: Forecast | None) -> None:
    """Once a run starts after all its checks: cache the speed its estimate measured, so the
    next run reads it (a dry run and a refused start never call this: they write nothing)."""
    keep(forecast.speeds if forecast is not None else None)


def measured_when(found, dry_run: bool, starts: str = "the run starts") -> str:
    """Where the machine's figures came from, and whether they will be cached (once `starts`)."""
    if found.cached:
        return "cached"
    measured = f"measured now in {found.measured_s:.1f} s"
    if dry_run:
        return f"{measured}; not cached: a dry run writes nothing"
    return f"{measured}; cached once {starts}"


def lora_words(job: Job) -> list[str]:
    """The LoRA line of the basis (none without adapters)."""
    if job.trainable is None:
        return []
    served = ""
    if not job.on_gpu and not job.sft:
        served = f"; on this CPU, inference copies the adapter ({job.served_dtype}) per token"
    return [
        f"LoRA: {job.trainable / 1e6:.1f}M adapter parameters on {job.lora_targets} "
        f"projection(s) a layer, the base frozen{served}"
    ]


SFT_GUESSED = "the data's first rows, without a tokenizer"
SFT_TOKENIZED = "tokenized as `sft` will, by its data check"


def basis(
    shape: ModelShape, source: str, job: Job, found, dry_run: bool = False, tokens: str = ""
) -> list[str]:
    """What the estimate rests on, one phrase each (`tokens`: where an SFT job's tokens per
    example come from)."""
    rates = ", ".join(f"{k} {v / 1e9:.0f} GFLOP/s" for k, v in sorted(found.matmul_flops.items()))
    when = measured_when(found, dry_run)
    work = (
        f"{job.rollouts} samples x ~{job.answer_tokens} tokens a step ({tokens or SFT_GUESSED})"
        if job.sft
        else f"{job.rollouts} rollouts x ~{job.prompt_tokens} prompt + up to {job.answer_tokens} "
        f"answer tokens, {job.max_turns} turn(s), async {job.async_level}"
    )
    return [
        f"model {shape.params / 1e6:.0f}M parameters, {shape.layers} layers, hidden "
        f"{shape.hidden}, vocabulary {shape.vocab} (from {source})",
        work,
        *lora_words(job),
        f"this machine: {rates} ({when}; fingerprint {found.fingerprint})",
    ]


def gib(value: float) -> str:
    """`5.1 GiB`, `120 MiB`, `35 kB`: bytes in the unit that reads best."""
    if value >= GIB:
        return f"{value / GIB:.1f} GiB"
    if value >= 2**20:
        return f"{value / 2**20:.0f} MiB"
    return f"{value / 1000:.0f} kB"


def validated(phases: dict[str, float]) -> str:
    """The validations' share of an SFT step, where it has any."""
    share = phases.get("validate", 0.0)
    return f"; validation {share:.1f} s a step on average" if share >= 0.05 else ""


def compiling(result: Forecast) -> str:
    """The run line's words for a compiled trainer's compile in its first step."""
    return f", compile {duration(result.compile_s)}" if result.compile_s >= 0.5 else ""


def describe(
    result: Forecast, job: Job, machine_gib: float | None, price: float | None
) -> list[str]:
    """The block's lines."""
    p = result.phases
    low, high = result.wall_range
    lines = [
        "Estimate (from the model's shape, the job and this machine's measured speed; "
        "corrected from measured steps once it runs):",
        f"  step: ~{result.step_s:.1f} s (train: forward, backward and AdamW{validated(p)})"
        if job.sft
        else f"  step: ~{result.step_s:.1f} s (generate {p['generate']:.1f}, orchestrator wait "
        f"{p['wait']:.1f}, train {p['train']:.1f}, publish {p['publish']:.1f})",
        f"  run: ~{duration(result.wall_s)} for {job.max_steps} steps ({duration(low)} to "
        f"{duration(high)}; start {duration(result.start_s)}{compiling(result)}, end "
        f"{duration(result.end_s)})",
    ]
    memory = ", ".join(f"{name} {gib(v)}" for name, v in result.memory.items())
    have = f" of {machine_gib:.0f} GiB" if machine_gib else ""
    lines.append(f"  peak memory: {memory}; machine {gib(result.machine_memory)}{have}")
    if result.gpu_memory:
        per_gpu = ", ".join(f"{name} {gib(v)} per GPU" for name, v in result.gpu_memory.items())
        lines.append(f"  GPU memory: {per_gpu}")
    parts = ", ".join(f"{name} {gib(v)}" for name, v in result.disk.items() if v)
    lines.append(f"  disk at the end: {gib(result.disk_total)} ({parts})")
    if result.gpu_hours:
        cost = f", about ${result.gpu_hours * price:,.2f} at ${price}/GPU-hour" if price else ""
        lines.append(f"  GPU-hours: {result.gpu_hours:.2f}{cost}")
    lines += [f"  basis: {line}" for line in result.basis]
    return lines


CHARS_PER_TOKEN = 4.0
"""Characters per token when a data file's rows are measured without a tokenizer."""
SAMPLE_ROWS = 200
SAMPLE_BYTES = 4 * 2**20
"""At most this much of a data file's start is read for its rows' length."""
TOKENS_SAID = "sft: data: mean tokens per example "
"""How `sft --check-data` says the mean tokens of the examples it tokenized (its one stdout
line), which `rl sft` reads back for its estimate (`tokens_said`)."""


def tokens_said(output: str) -> float | None:
    """The mean tokens per example `sft --check-data` said in `output` (its stdout), or None."""
    for line in output.splitlines()[-8:]:
        if line.startswith(TOKENS_SAID):
            try:
                value = float(line[len(TOKENS_SAID) :].strip()[:32])
            except ValueError:
                return None
            return value if 0 < value < 2**31 else None
    return None


def data_tokens(name: str, seq_len: int) -> int:
    """The mean tokens of an SFT data file's first rows without a tokenizer: each row's
    characters (its JSON keys and quotes standing in for the chat template's tokens) /
    CHARS_PER_TOKEN, at most `seq_len`; `seq_len` x ANSWER_FILL where the file is not a regular
    file here (a hub data set; a FIFO is never waited on)."""
    from rlcore.forecast.model import ANSWER_FILL

    lines = first_lines(Path(name).expanduser())
    lengths = [len(line) / CHARS_PER_TOKEN for line in lines[:SAMPLE_ROWS] if line.strip()]
    if not lengths:
        return int(seq_len * ANSWER_FILL)
    return int(min(sum(lengths) / len(lengths), seq_len))


def first_lines(path: Path) -> list[str]:
    """The whole lines in the first SAMPLE_BYTES of `path`; none unless it is a regular file."""
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        os.set_blocking(fd, True)
        data = os.read(fd, SAMPLE_BYTES)
    except OSError:
        return []
    finally:
        os.close(fd)
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines if len(data) < SAMPLE_BYTES else lines[:-1]  # the last one may be cut


def validation_tokens(config, tokens: float) -> float:
    """Tokens an SFT run's validations forward in all: its examples (at most
    `val.num_examples`; `val.name`'s rows where it is a local JSONL file, `val_rows`) at
    `tokens` each, every `val.interval` steps and after the last; 0 without `[val]` or where
    the rows cannot be counted here (a split of `data.name`, a hub data set)."""
    val = config.val
    if val is None:
        return 0.0
    rows = val_rows(val.name) if val.name else 0
    if val.num_examples is not None:
        rows = min(rows, val.num_examples) if rows else val.num_examples
    runs = config.max_steps // val.interval + (1 if config.max_steps % val.interval else 0)
    return float(rows * tokens * runs)


def val_rows(name: str) -> int:
    """The rows of a local JSONL file: counted in its first SAMPLE_BYTES, scaled by its size
    beyond them; 0 where it is no regular file here (a hub data set, a folder, a FIFO)."""
    import os

    path = Path(name).expanduser()
    lines = [line for line in first_lines(path) if line.strip()]
    if not lines:
        return 0
    try:
        size = os.stat(path).st_size
    except OSError:
        return len(lines)
    if size <= SAMPLE_BYTES:
        return len(lines)
    return round(len(lines) * size / SAMPLE_BYTES)


def compile_cached() -> bool:
    """Whether inductor's cache already holds compiled graphs (trainer/speed.py's folder:
    `$TORCHINDUCTOR_CACHE_DIR`, else the cache folder's `compile/`): a compile then builds
    less (rlcore.forecast.model.COMPILE_CACHED_IMPORTS)."""
    folder = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or cache_dir() / "compile")
    try:
        return any((folder / "fxgraph").iterdir())
    except OSError:  # none yet, or not readable: taken as cold
        return False


MODELINFO_ENTRIES = 10_000
"""The most entries of vLLM's modelinfos folder looked at (a folder of more is taken as holding
the answer: nothing is counted)."""


def vllm_inspects(architecture: str) -> bool:
    """Whether vLLM will inspect `architecture` at its start: its modelinfos folder
    (`$VLLM_CACHE_ROOT`, else `$XDG_CACHE_HOME/vllm` or `~/.cache/vllm`) holds no answer for
    that class (files named `<module>-<class>.json`). Only names are read; an unknown
    architecture or a folder that cannot be listed counts nothing. A vLLM upgrade may inspect
    again where a file is there (its hash of vLLM's code differs): not foreseen."""
    if not architecture:
        return False
    root = os.environ.get("VLLM_CACHE_ROOT") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm"
    )
    suffix = f"-{architecture}.json"
    try:
        with os.scandir(Path(root).expanduser() / "modelinfos") as entries:
            for index, entry in enumerate(entries):
                if index >= MODELINFO_ENTRIES or entry.name.endswith(suffix):
                    return False
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def attends_whole_rows(kernel: str, on_gpu: bool, masked_rows: bool, may_compile: bool) -> bool:
    """Whether the trainer's attention computes every token of a packed row against every other
    (trainer/attention.py `choose_attention`): sdpa and eager do, through a mask (shared
    prompts' explicit one, or transformers' block-diagonal one for packed samples); `auto`
    takes sdpa on a CPU where rows carry a mask (`masked_rows`) or the model may compile, and
    otherwise goes sample by sample (a CPU) or runs a variable-length kernel (a GPU)."""
    if kernel == "auto":
        return not on_gpu and (masked_rows or may_compile)
    return kernel in ("sdpa", "eager")


def sft_job(config, machine, shape: ModelShape, tokens: float | None = None) -> Job:
    """The `rl sft` run of `config` on this machine, as the estimate sees it (CPU or GPU 0);
    `tokens`: the mean tokens per example as tokenized (`sft --check-data`), else guessed from
    the data file (`data_tokens`)."""
    from rlcore.forecast.memory import trainer_peak
    from rlcore.host.machine import compute_dtype

    on_gpu = bool(machine and machine.num_gpus)
    dtype, _ = compute_dtype(config.model.dtype, on_gpu, machine)
    data = config.data
    seq_len = min(data.seq_len or config.seq_len, config.seq_len)
    tokens = min(round(tokens), seq_len) if tokens else data_tokens(data.name, seq_len)
    micro = data.micro_batch_tokens or max(seq_len, 2048)
    trainable = lora_trainable(config.lora, shape)
    ac = config.model.activation_checkpointing is True
    peak = trainer_peak(
        shape,
        min(micro, tokens * data.batch_size),
        DTYPE_BYTES.get(dtype, 4),
        ac,
        trainable=trainable,
        head_chunk=config.model.logprob_chunk_tokens,
        on_gpu=on_gpu,
    )
    saved, kept = checkpoint_counts(config.ckpt, config.max_steps)
    return Job(
        max_steps=config.max_steps,
        rollouts=data.batch_size,
        rollouts_per_example=data.batch_size,
        prompt_tokens=0,
        answer_tokens=tokens,
        seq_len=seq_len,
        train_dtype=dtype,
        trainable=trainable,
        lora_targets=len(config.lora.target_modules) if config.lora else 0,
        micro_batch_tokens=micro,
        compiled=config.model.compile is True,
        compile_cached=config.model.compile is True and compile_cached(),
        row_attention=attends_whole_rows(
            config.model.attn_implementation, on_gpu, False, config.model.compile is True
        ),
        on_gpu=on_gpu,
        trainer_gpus=1 if on_gpu else 0,
        checkpoints_kept=kept,
        checkpoints_saved=saved,
        policy_folders=1,
        archive=False,
        sft=True,
        validation_tokens=validation_tokens(config, tokens),
        trainer_peak=TRAINER_RESIDENT * sum(peak.values()),
        answer_fill=1.0,
    )


def sft_forecast(config, tokens: float | None = None) -> tuple[Forecast | None, list[str]]:
    """The estimate for an SFT run and its block's lines (`tokens`: as `sft_job`); never
    raises."""
    try:
        from rlcore.host.machine import probe

        machine = probe()
        shape, source = shape_of(config.model.name)
        if shape is None:
            return None, [f"Estimate: not made ({source})"]
        job = sft_job(config, machine, shape, tokens)
        found, why = measured_speeds(machine, [job.train_dtype], "cuda" if job.on_gpu else "cpu")
        if found is None:
            return None, [f"Estimate: not made ({why})"]
        slowdown, busy = shared(machine)
        key = contention.key(found.fingerprint, shape.params, "sft")
        kept = None if job.on_gpu else contention.recall(key)
        job = replace(job, pace=kept.factor) if kept is not None else job
        result = estimate(job, shape, found, slowdown)
        said = SFT_TOKENIZED if tokens else SFT_GUESSED
        paced = [] if job.on_gpu else [contention.words(kept, shape.params, "sft")]
        result.basis = basis(shape, source, job, found, tokens=said) + paced + busy
        result.speeds, result.contention_key = found, "" if job.on_gpu else key
        return result, describe(result, job, machine.memory_gib, None)
    except Exception as err:  # noqa: BLE001  (an estimate never stops a run)
        return None, [f"Estimate: not made ({type(err).__name__}: {str(err)[:160]})"]
