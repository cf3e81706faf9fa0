"""The trainer step's memory on CPU, phase by phase: the quick start's trainer (the bundled
SmolLM2-135M, bf16 compute on fp32 master weights, AdamW) on fake batches of the quick start's
size (32 samples x 64 tokens), the process's peak resident memory in forward + backward and in
the optimizer step, and its CPU time, system time and page faults per step.

    .venv/bin/python benchmarks/step_memory.py [--steps 3] [--set data.micro_batch_tokens=256]
    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 .venv/bin/python benchmarks/step_memory.py

`--set` takes any trainer option (dotted name = JSON value), e.g. model.activation_checkpointing
=true or model.logprob_chunk_tokens=128. The peak is Linux's VmHWM, reset before each phase.
"""

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUICK_START = {
    "max_steps": 100,
    "seq_len": 256,
    "model": {
        "name": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "dtype": "bfloat16",
        "serving_dtype": "float32",
    },
    "optim": {"lr": 3e-5, "max_norm": 1.0},
    "ckpt": {"enabled": False},
    "data": {"fake": {"batch_size": 32, "seq_len": 64}},
}


def status_gib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS


def config(settings: list[str], out: Path):
    from trainer.config import TrainerConfig

    data = json.loads(json.dumps(QUICK_START)) | {"output_dir": str(out)}
    for setting in settings:
        name, _, value = setting.partition("=")
        *parents, leaf = name.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = json.loads(value)
    return TrainerConfig.model_validate(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=JSON")
    args = parser.parse_args()
    import torch

    import trainer.train as train
    from trainer.data import fake_batch
    from trainer.dist import setup_world

    torch.set_num_threads(2)
    cfg = config(args.set, Path(tempfile.mkdtemp(prefix="step-memory-")))
    trainer = train.setup_trainer(cfg, setup_world())
    print(f"set up: {status_gib('VmRSS'):.2f} GiB resident", flush=True)
    phases: dict[str, float] = {}
    forward_backward, optimizer_step = train.forward_backward, trainer.optimizer.step

    def measured_forward_backward(*a, **k):
        reset_peak()
        result = forward_backward(*a, **k)
        phases["forward+backward"] = status_gib("VmHWM")
        return result

    def measured_step(*a, **k):
        reset_peak()
        result = optimizer_step(*a, **k)
        phases["optimizer"] = status_gib("VmHWM")
        return result

    train.forward_backward, trainer.optimizer.step = measured_forward_backward, measured_step
    vocab = trainer.model.config.vocab_size
    for step in range(args.steps):
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        train.train_step(trainer, fake_batch(cfg.data.fake, 64, vocab, step, 0))
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        peaks = ", ".join(f"{name} {gib:.2f}" for name, gib in phases.items())
        print(
            f"step {step}: {time.perf_counter() - start:.1f} s wall, {cpu:.1f} s CPU "
            f"({after.ru_stime - before.ru_stime:.1f} s system, "
            f"{after.ru_minflt - before.ru_minflt:,} page faults); peak GiB: {peaks}; "
            f"after {status_gib('VmRSS'):.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
