"""Trainer throughput on synthetic batches, with weight publishing and checkpoints on the step's
timeline.

    .venv/bin/python benchmarks/trainer_throughput.py                  # default model, CPU
    python benchmarks/trainer_throughput.py --preset single-16k         # GPU: 1 x 16,384 tokens
    python benchmarks/trainer_throughput.py --preset packed-8x2k        # GPU: 8 x 2,048 packed

Each step runs what the trainer runs: `train_step` (pack, forward, backward, clip, AdamW), then
the weight publish of the configured transport (background by default) and, every
`--ckpt-interval` steps, a checkpoint. Prints per dtype: seconds per step, tokens/s, MFU on a GPU
(model FLOPs against `--peak-tflops`, 989 for an H100's dense bf16), peak memory next to the
pre-flight estimate, and the seconds publish and checkpoint keep the training thread waiting
(plus their background write times), the first step's time, the speed choices and the
estimate's training step against the measured one (rlcore.forecast.model.train_parts, from this
machine's calibration, cached as `rl` caches it). Compile and
activation checkpointing default to the trainer's `auto` (trainer/speed_policy.py) for a run of
`--run-steps` steps; `--compile` / `--no-compile` and `--checkpointing` / `--no-checkpointing`
set them. The presets build a Qwen3-0.6B-shaped model from its config (random weights, no hub)
into the cache folder.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import save  # noqa: E402
from rlcore.config.base import DEFAULT_MODEL  # noqa: E402

H100_BF16_TFLOPS = 989.0
# Qwen3-0.6B's shape (its config.json), built with random weights.
QWEN3_06B = dict(
    vocab_size=151936,
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
)
PRESETS = {  # the two setups of the GPU throughput table: (batch size, tokens per sample)
    "single-16k": (1, 16384),
    "packed-8x2k": (8, 2048),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), help="a GPU setup (see above)")
    parser.add_argument("--model", default=None, help="model name or HF folder")
    parser.add_argument("--dtypes", default=None, help="comma-separated compute dtypes")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per batch")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per sample")
    parser.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=None,
        help="tokens per forward pass (data.micro_batch_tokens); default: the whole batch",
    )
    parser.add_argument("--attn", default="auto", help="model.attn_implementation")
    parser.add_argument(
        "--checkpointing",
        action=argparse.BooleanOptionalAction,
        default="auto",
        help="model.activation_checkpointing true / false (default: auto)",
    )
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default="auto",
        help="model.compile true / false (default: auto)",
    )
    parser.add_argument(
        "--run-steps",
        type=int,
        default=1000,
        help="max_steps of the run the auto choices see (the benchmark runs --steps + 1)",
    )
    parser.add_argument(
        "--logprob-chunk-tokens",
        type=lambda v: None if v == "none" else int(v),
        default=2048,
        help="model.logprob_chunk_tokens ('none': full logits)",
    )
    parser.add_argument(
        "--lora-rank",
        type=int,
        default=None,
        help="train rank-r LoRA adapters on every projection (alpha 2r) instead of the model",
    )
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    parser.add_argument("--ckpt-interval", type=int, default=2, help="checkpoint every n steps")
    parser.add_argument(
        "--foreground",
        action="store_true",
        help="publish and checkpoint in the foreground (weight_transfer/ckpt.background = false)",
    )
    parser.add_argument("--weights-dir", default=None, help="weight_transfer.dir (/dev/shm)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="for MFU (GPU: 989)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch CPU threads")
    parser.add_argument("--json", default=None, help="where to write the figures (JSON)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.ckpt_interval < 1:
        parser.error("--steps and --ckpt-interval must be at least 1 (a timed step is needed)")
    if args.preset:
        args.batch_size, args.seq_len = PRESETS[args.preset]
        args.model = args.model or str(qwen3_06b_folder())
        args.dtypes = args.dtypes or "bfloat16"
    args.model = args.model or DEFAULT_MODEL
    args.dtypes = args.dtypes or "bfloat16,float32"
    return args


def qwen3_06b_folder() -> Path:
    """A Qwen3-0.6B-shaped model with random weights, built once into the cache folder."""
    from rlcore.host.models import cache_dir, cached_build

    def build(out: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, Qwen3Config

        config = Qwen3Config(**QWEN3_06B, architectures=["Qwen3ForCausalLM"])
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.save_pretrained(out)

    return cached_build(cache_dir() / "qwen3-0.6b-shape-random", build)


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def trainer_config(args: argparse.Namespace, dtype: str, out: Path):
    from trainer.config import TrainerConfig

    lora = args.lora_rank and {
        "rank": args.lora_rank,
        "alpha": 2.0 * args.lora_rank,
        "target_modules": LORA_TARGETS,
    }
    return TrainerConfig.model_validate(
        {
            **({"lora": lora} if lora else {}),
            "model": {
                "name": args.model,
                "dtype": dtype,
                "attn_implementation": args.attn,
                "activation_checkpointing": args.checkpointing,
                "compile": args.compile,
                "logprob_chunk_tokens": args.logprob_chunk_tokens,
            },
            "seq_len": args.seq_len,
            "max_steps": max(args.run_steps, args.steps + 1),
            "output_dir": str(out),
            "data": {
                "fake": {"batch_size": args.batch_size},
                "micro_batch_tokens": args.micro_batch_tokens or args.batch_size * args.seq_len,
            },
            "ckpt": {"interval": args.ckpt_interval, "keep": 1, "background": not args.foreground},
            "weight_transfer": {"background": not args.foreground, "dir": args.weights_dir},
        }
    )


def bench(args: argparse.Namespace, dtype: str) -> dict:
    """Timed steps (after one warm-up) of train + publish + periodic checkpoint."""
    import torch

    from trainer.data import fake_batch
    from trainer.dist import setup_world, teardown_world
    from trainer.train import setup_trainer

    world = setup_world()
    with tempfile.TemporaryDirectory(prefix="rl-bench-") as out:
        trainer = setup_trainer(trainer_config(args, dtype, Path(out)), world)
        vocab_size = trainer.model.config.get_text_config().vocab_size
        rows = []
        for step in range(1, args.steps + 2):
            batch = fake_batch(trainer.config.data.fake, args.seq_len, vocab_size, step - 1, 0)
            rows.append(timed_step(trainer, batch, step, args.ckpt_interval))
            print_row(step, rows[-1], args.batch_size * args.seq_len)
        trainer.sender.close()
        trainer.checkpointer.close()
        ckpt_write_s = trainer.checkpointer.writer.last_write_s
        peak = (torch.cuda.max_memory_allocated() if world.device.type == "cuda" else None) or rows[
            -1
        ]["peak_memory_gib"] * 2**30
    teardown_world(world)
    return {
        "rows": rows[1:],
        "warmup_s": rows[0]["total_s"],
        "peak": float(peak),
        "model": trainer.model,
        "speed": trainer.model.speed,
        "ckpt_write_s": ckpt_write_s,
    }


def print_row(step: int, row: dict, tokens: int) -> None:
    """One step's figures as it ends: a run that fails later still leaves them in its log."""
    print(
        f"  step {step}{' (warm-up)' if step == 1 else ''}: {row['total_s']:.3f} s, "
        f"{tokens / row['total_s']:,.0f} tokens/s (train {row['train_s']:.3f}, publish "
        f"{row['publish_s']:.3f}, checkpoint {row['ckpt_s']:.3f}), peak "
        f"{row.get('peak_memory_gib', 0.0):.2f} GiB",
        flush=True,
    )


def timed_step(trainer, batch, step: int, ckpt_interval: int) -> dict:
    """One step of the trainer's loop: train, publish, maybe checkpoint (wall seconds each)."""
    import torch

    from trainer.train import train_step

    sync = torch.cuda.synchronize if trainer.world.device.type == "cuda" else (lambda: None)
    staged_before = trainer.checkpointer.staging_wait_s
    start = time.perf_counter()
    metrics = train_step(trainer, batch)
    sync()
    train_s = time.perf_counter() - start
    staging_s = trainer.checkpointer.staging_wait_s - staged_before
    trainer.sender.publish(step)
    trainer.sender.prune(step)
    publish_s = time.perf_counter() - start - train_s
    ckpt_s = 0.0
    if step % ckpt_interval == 0:
        t = time.perf_counter()
        args = (trainer.model, trainer.optimizer, trainer.scheduler, {})
        metrics |= trainer.checkpointer.save(step, *args)
        ckpt_s = time.perf_counter() - t
    metrics |= trainer.sender.metrics()
    total_s = time.perf_counter() - start
    return metrics | {
        "train_s": train_s,
        "publish_s": publish_s,
        "ckpt_s": ckpt_s,
        "staging_s": staging_s,
        "total_s": total_s,
    }


def flops_per_token(model, sample_len: int) -> float:
    """Training FLOPs per token: 6 x parameters (matmuls, forward and backward) plus causal
    attention, 6 x layers x query width x sample length (the convention of published MFU
    figures; activation recompute is not counted)."""
    config = model.config.get_text_config()
    params = sum(p.numel() for p in model.parameters())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    width = config.num_attention_heads * head_dim
    return 6 * params + 6 * config.num_hidden_layers * width * sample_len


def estimate(args: argparse.Namespace, dtype: str, speed) -> str:
    """The pre-flight estimate of the same setup (launcher.memory), with the activation
    checkpointing the trainer chose (`speed`)."""
    import torch

    from launcher.memory import background_copies, describe, model_shape, trainer_peak
    from rlcore.host.models import resolve_model

    shape = model_shape(Path(resolve_model(args.model)))
    if shape is None:
        return "no estimate (the model folder does not say its shape)"
    tokens = args.micro_batch_tokens or args.batch_size * args.seq_len
    compute_bytes = 4 if dtype == "float32" else 2
    trainable = None  # LoRA: launcher.memory's count of the adapters
    if args.lora_rank:
        trainable = 2 * args.lora_rank * shape.hidden * len(LORA_TARGETS) * shape.layers
    parts = trainer_peak(
        shape,
        tokens,
        compute_bytes,
        speed.checkpointing,
        trainable=trainable,
        head_chunk=args.logprob_chunk_tokens,
        checkpoint_freq=speed.checkpointing_freq,
        on_gpu=torch.cuda.is_available(),
    )
    if not torch.cuda.is_available():  # the background writes' copies are host memory
        parts["background copies"] = background_copies(
            shape, trainable, not args.foreground, not args.foreground
        )
    return describe(parts)


def machine_speeds(args: argparse.Namespace, on_gpu: bool):
    """This machine's calibrated speeds in the benchmark's dtypes (rlcore.forecast.calibrate,
    cached per machine), or None with the reason printed."""
    from rlcore.forecast.calibrate import keep
    from rlcore.forecast.report import measured_speeds
    from rlcore.host.machine import probe

    found, why = measured_speeds(probe(), args.dtypes.split(","), "cuda" if on_gpu else "cpu")
    if found is None:
        print(f"no step estimate: {why}")
    keep(found)  # cached for the next call, as `rl` caches it
    return found


def step_estimate(args: argparse.Namespace, dtype: str, speed, speeds) -> dict | None:
    """The pre-launch estimate's training step for this setup (rlcore.forecast.model.train_s:
    the benchmark's samples as `fake_batch` makes them, each its own prompt of a quarter of
    its tokens and the loss's answer of the rest, with the activation checkpointing the
    trainer chose and its rows attended as the trainer attends them), its parts in seconds;
    None where the shape or the speeds are unknown."""
    from rlcore.forecast.model import Job, train_parts
    from rlcore.forecast.report import attends_whole_rows
    from rlcore.forecast.shape import shape_of
    from trainer.config import DataConfig

    shape, _ = shape_of(args.model)
    if shape is None or speeds is None:
        return None
    import torch

    on_gpu = torch.cuda.is_available()
    trainable = None
    if args.lora_rank:
        trainable = 2 * args.lora_rank * shape.hidden * len(LORA_TARGETS) * shape.layers
    prompt = max(1, args.seq_len // 4)  # trainer.data.fake_batch's
    job = Job(
        max_steps=args.steps,
        rollouts=args.batch_size,
        rollouts_per_example=1,
        prompt_tokens=prompt,
        answer_tokens=args.seq_len - prompt,
        answer_fill=1.0,
        train_dtype=dtype,
        trainable=trainable,
        lora_targets=len(LORA_TARGETS) if trainable else 0,
        micro_batch_tokens=args.micro_batch_tokens or args.batch_size * args.seq_len,
        compiled=speed.compile,
        row_attention=attends_whole_rows(
            args.attn, on_gpu, DataConfig().share_prompts, speed.compile
        ),
        recompute=1 / speed.checkpointing_freq if speed.checkpointing else 0.0,
        on_gpu=on_gpu,
        trainer_gpus=1 if on_gpu else 0,
    )
    parts = train_parts(job, shape, speeds, args.seq_len - prompt)
    return {"train_s": sum(parts.values()), **{f"{k}_s": v for k, v in parts.items()}}


def train_alone(rows: list[dict]) -> tuple[float, str]:
    """The median train time of the steps no checkpoint's background write ran beside (the
    step after a checkpoint shares the cores with its write: 1.3-1.5x on a 2-core CPU), and
    which steps those are; all steps where every one follows a checkpoint."""
    after = zip([None, *rows], rows, strict=False)
    alone = [r for prev, r in after if prev is None or prev["ckpt_s"] == 0]
    which = "steps after a checkpoint left out" if len(alone) < len(rows) else "every step"
    if not alone:
        alone, which = rows, "every step, each after a checkpoint"
    return statistics.median(r["train_s"] for r in alone), which


def estimate_line(estimate: dict | None, train_s: float, which: str = "every step") -> str:
    """The step estimate against the measured train time (`which` steps), parts in seconds."""
    if estimate is None:
        return "no step estimate"
    parts = ", ".join(
        f"{k.removesuffix('_s')} {v:.3f}" for k, v in estimate.items() if k != "train_s" and v
    )
    ratio = train_s / estimate["train_s"]
    return (
        f"train estimated {estimate['train_s']:.3f} s ({parts}); measured {train_s:.3f} s "
        f"({which}), measured/estimated {ratio:.2f}"
    )


def report(
    args: argparse.Namespace, dtype: str, result: dict, peak_tflops: float | None, speeds=None
) -> dict:
    """Print the dtype's figures; returns them for the JSON file."""
    rows, num_tokens = result["rows"], args.batch_size * args.seq_len

    def med(key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rows)

    step_s = med("total_s")
    step = step_estimate(args, dtype, result["speed"], speeds)
    tokens_s = num_tokens / step_s
    mfu, mfu_pct = "", None
    if peak_tflops:
        flops = flops_per_token(result["model"], args.seq_len) * tokens_s
        mfu_pct = 100 * flops / (peak_tflops * 1e12)
        mfu = f", MFU {mfu_pct:.1f}% of {peak_tflops:g} TFLOP/s"
    ckpt_rows = [r for r in rows if r["ckpt_s"] > 0] or [{"ckpt_s": 0.0}]
    print(
        f"{dtype:>9}: {step_s:.3f} s/step, {tokens_s:,.0f} tokens/s{mfu}\n"
        f"{'':>9}  timeline per step: train {med('train_s'):.3f} s (forward "
        f"{med('forward_s'):.3f}, backward {med('backward_s'):.3f}, optimizer "
        f"{med('optimizer_s'):.3f}), publish {med('publish_s'):.3f}"
        f" s (background write {med('publish_write_s'):.3f} s, waited {med('publish_wait_s'):.3f}"
        f" s), checkpoint {statistics.median(r['ckpt_s'] for r in ckpt_rows):.3f} s every "
        f"{args.ckpt_interval} steps (background write {result['ckpt_write_s']:.3f} s, the next "
        f"update waited {max(r['staging_s'] for r in rows):.3f} s for its copy)\n"
        f"{'':>9}  peak memory {result['peak'] / 2**30:.2f} GiB; pre-flight estimate "
        f"{estimate(args, dtype, result['speed'])}\n"
        f"{'':>9}  first step {result['warmup_s']:.1f} s; speed: {result['speed'].describe()}\n"
        f"{'':>9}  {estimate_line(step, *train_alone(rows))}",
        flush=True,
    )
    return {
        "step_s": step_s,
        "tokens_s": tokens_s,
        "mfu_pct": mfu_pct,
        "peak_memory_gib": result["peak"] / 2**30,
        "warmup_s": result["warmup_s"],
        "speed": result["speed"].record(),
        "step_estimate": step,
        "steps": rows,
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import logging

    import torch

    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    on_gpu = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if on_gpu else f"cpu ({args.threads} threads)"
    peak_tflops = args.peak_tflops or (H100_BF16_TFLOPS if on_gpu else None)
    mbt = args.micro_batch_tokens or args.batch_size * args.seq_len
    print(
        f"model {args.model}, {args.batch_size} x {args.seq_len} tokens, {device}, "
        f"{mbt} tokens per forward pass, activation checkpointing {args.checkpointing}"
    )
    speeds = machine_speeds(args, on_gpu)
    figures = {
        dtype: report(args, dtype, bench(args, dtype), peak_tflops, speeds)
        for dtype in args.dtypes.split(",")
    }
    data = {"device": device, "args": vars(args), "figures": figures}
    data["speeds"] = speeds.record() if speeds else None
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    else:
        save(f"trainer_throughput-{args.preset or 'custom'}", data)


if __name__ == "__main__":
    main()
