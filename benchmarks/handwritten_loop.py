"""The baseline a user writes by hand: a plain transformers training loop on the same synthetic
batches as `trainer_throughput.py`, for the suite's side-by-side table (benchmarks/gpu_suite.sh).

    python benchmarks/handwritten_loop.py --preset packed-8x2k --json hand-packed.json    # GPU
    python benchmarks/handwritten_loop.py --preset single-16k --json hand-single.json     # GPU
    python benchmarks/handwritten_loop.py --preset tiny --model DIR --steps 1             # CPU

What it does, as one would write it: fp32 weights, forward and backward under bf16 autocast,
activation checkpointing on every layer (without it the full [tokens x vocab] logits of 16k
tokens do not fit in 80 GB), the full logits' log-softmax for a policy-gradient loss, AdamW
(torch's default kernel), one step per batch. Packed rows restart their position ids at each
sample; on CUDA, torch's variable-length flash attention is registered with transformers (and a
mask function that builds no dense mask), elsewhere sdpa with the mask transformers builds.
Nothing of the trainer is used. Prints tokens/s and peak memory; `--json` writes them.
"""

import argparse
import inspect
import json
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.trainer_throughput import PRESETS, qwen3_06b_folder  # noqa: E402

HAND_PRESETS = {**PRESETS, "tiny": (2, 64)}  # tiny: the CPU check on the tests' tiny model
ATTENTION = "hand_varlen"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(HAND_PRESETS), default="packed-8x2k")
    parser.add_argument("--model", default=None, help="HF folder (GPU presets: Qwen3-0.6B shape)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps after one warm-up")
    parser.add_argument("--lr", type=float, default=1e-6, help="AdamW learning rate")
    parser.add_argument("--json", default=None, help="where to write the figures (JSON)")
    args = parser.parse_args(argv)
    if args.model is None:
        if args.preset == "tiny":
            parser.error("--preset tiny needs --model (the tests' tiny model folder)")
        args.model = str(qwen3_06b_folder())
    return args


def fake_rows(batch: int, length: int, vocab: int, step: int, device):
    """One packed row of `batch` samples of `length` random tokens: (input ids, position ids
    restarting at each sample, next-token targets, per-token advantages)."""
    import torch

    generator = torch.Generator().manual_seed(step)
    ids = torch.randint(0, vocab, (1, batch * length), generator=generator)
    positions = torch.arange(length).repeat(batch).unsqueeze(0)
    targets = torch.roll(ids, -1, dims=1)
    advantages = torch.randn(1, batch * length, generator=generator)
    return tuple(t.to(device) for t in (ids, positions, targets, advantages))


def varlen_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """transformers' attention interface on torch's varlen flash kernel: [B, H, T, D] in,
    [B, T, H, D] out, causal within each packed sample (boundaries where positions restart)."""
    import torch
    from torch.nn.attention.varlen import varlen_attn

    batch, heads, length, dim = query.shape
    positions = kwargs["position_ids"].reshape(-1)
    starts = torch.nonzero(positions == 0).reshape(-1)
    ends = torch.tensor([positions.numel()], device=positions.device)
    cu = torch.cat([starts, ends]).to(torch.int32)
    longest = int((cu[1:] - cu[:-1]).max())
    groups = heads // key.shape[1]

    def flat(t, repeat=1):  # [B, H, T, D] -> [B*T, H, D] in bf16 (Qwen3's norms give fp32)
        t = t.repeat_interleave(repeat, dim=1) if repeat > 1 else t
        return t.transpose(1, 2).reshape(-1, t.shape[1], dim).to(torch.bfloat16)

    params = inspect.signature(varlen_attn).parameters
    causal = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
    out = varlen_attn(
        flat(query),
        flat(key, groups),
        flat(value, groups),
        cu,
        cu,
        longest,
        longest,
        scale=scaling,
        **causal,
    )
    return out.reshape(batch, length, heads, dim), None


def load(model_dir: str, device):
    """The model in fp32 on `device`, varlen attention where CUDA has it, checkpointing on."""
    import torch
    from transformers import AttentionInterface, AutoModelForCausalLM
    from transformers.masking_utils import AttentionMaskInterface

    attention = "sdpa"
    if device.type == "cuda":
        try:
            from torch.nn.attention.varlen import varlen_attn  # noqa: F401

            AttentionInterface.register(ATTENTION, varlen_attention)
            AttentionMaskInterface.register(ATTENTION, lambda *args, **kwargs: None)
            attention = ATTENTION
        except ImportError:
            pass
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation=attention
    ).to(device)
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model, attention


def train_step(model, optimizer, rows, device) -> float:
    """One step; its wall seconds."""
    import torch

    ids, positions, targets, advantages = rows
    start = time.perf_counter()
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        logits = model(input_ids=ids, position_ids=positions).logits
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    picked = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    loss = -(picked * advantages).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def peak_memory_gib(device) -> float:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run(args: argparse.Namespace) -> dict:
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batch, length = HAND_PRESETS[args.preset]
    model, attention = load(args.model, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    vocab = model.config.get_text_config().vocab_size
    times = [
        train_step(model, optimizer, fake_rows(batch, length, vocab, step, device), device)
        for step in range(args.steps + 1)
    ]
    step_s = statistics.median(times[1:])
    return {
        "preset": args.preset,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "attention": attention,
        "tokens_per_step": batch * length,
        "step_s": step_s,
        "tokens_s": batch * length / step_s,
        "warmup_s": times[0],
        "peak_memory_gib": peak_memory_gib(device),
        "steps": times[1:],
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    figures = run(args)
    print(
        f"hand-written loop, {args.preset} on {figures['device']} ({figures['attention']}): "
        f"{figures['step_s']:.3f} s/step, {figures['tokens_s']:,.0f} tokens/s, peak memory "
        f"{figures['peak_memory_gib']:.2f} GiB",
        flush=True,
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    main()
