"""Batches in, micro-batches out.

Consumes `rollouts/step_<n>` (written by the orchestrator, see rlcore.protocol), waits for it
with a timeout, and packs its samples into micro-batches of at most `micro_batch_tokens` tokens.
Samples packed into one row get position ids that restart at 0, which transformers turns into a
block-diagonal causal mask: no token attends across samples.

With `data.share_prompts`, the samples of one prompt (a group's rollouts) go in as one unit: the
prompt but its last token once, then one segment per sample (that last token and the
completion, positions continuing the prompt's), under an explicit mask that lets each segment
see the shared prompt and itself. Every logit is what the sample alone would give, for a
fraction of the tokens (the quick start's 32 x 52 tokens become 4 x 36 + 32 x 16).
"""

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from rlcore.protocol import BATCH_META, Batch, Sample, read_batch
from trainer.config import FakeDataConfig


class BatchError(ValueError):
    """A batch that breaks the contract (e.g. a sample longer than a micro-batch)."""


def wait_for_batch(folder: Path, timeout_s: float, poll_s: float = 0.2) -> Batch:
    """Read the batch in `folder` once it exists; TimeoutError naming the path otherwise."""
    deadline = time.monotonic() + timeout_s
    while not (folder / BATCH_META).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"waited {timeout_s:.0f} s for the orchestrator's batch {folder} "
                "(is the orchestrator running with the same output_dir? raise "
                "data.wait_timeout_s if it is just slow)"
            )
        time.sleep(poll_s)
    return read_batch(folder)


def fake_batch(config: FakeDataConfig, seq_len: int, vocab_size: int, step: int, seed: int):
    """A synthetic batch of `batch_size` samples of `seq_len` tokens (a quarter prompt),
    the same for the same (seed, step)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    num_tokens = config.seq_len or seq_len
    num_prompt = max(1, num_tokens // 4)
    num_completion = num_tokens - num_prompt
    samples = []
    for _ in range(config.batch_size):
        ids = torch.randint(0, vocab_size, (num_tokens,), generator=gen).tolist()
        samples.append(
            Sample(
                prompt_ids=ids[:num_prompt],
                completion_ids=ids[num_prompt:],
                completion_mask=[1] * num_completion,
                completion_logprobs=[-math.log(vocab_size)] * num_completion,
                advantage=float(torch.randn((), generator=gen)),
            )
        )
    return Batch(step=step, temperature=1.0, samples=samples)


@dataclass
class MicroBatch:
    """One packed row. Per-token arrays are aligned with the logits: position j holds what the
    logits at j are scored against (the next token of the same sample)."""

    input_ids: torch.Tensor  # [1, T] int64
    position_ids: torch.Tensor  # [1, T] int64, restarting at 0 for every sample
    target_ids: torch.Tensor  # [T] int64
    loss_mask: torch.Tensor  # [T] bool: completion tokens the policy produced
    inference_logprobs: torch.Tensor  # [T] float32
    advantages: torch.Tensor  # [T] float32, the sample's advantage
    loss_weights: torch.Tensor  # [T] float32, the sample's loss_weight
    sample_ids: torch.Tensor  # [T] int64, which of the row's samples (0, 1, ...) holds j
    attention_mask: torch.Tensor | None = None  # [1, 1, T, T] bool where prompts are shared

    @property
    def num_tokens(self) -> int:
        return self.input_ids.shape[1]

    def to(self, device: torch.device) -> "MicroBatch":
        fields = {k: None if v is None else v.to(device) for k, v in vars(self).items()}
        return MicroBatch(**fields)


def sample_arrays(sample: Sample) -> dict[str, list]:
    """The sample's tokens and its logit-aligned per-token arrays."""
    tokens = sample.prompt_ids + sample.completion_ids
    num_prompt, length = len(sample.prompt_ids), len(tokens)
    mask = [False] * length
    logprobs = [0.0] * length
    pairs = zip(sample.completion_mask, sample.completion_logprobs, strict=True)
    for i, (m, lp) in enumerate(pairs):
        pos = num_prompt + i - 1  # the logits at pos predict completion token i
        if pos >= 0 and m and sample.loss_weight != 0:
            mask[pos], logprobs[pos] = True, lp
    return {
        "input_ids": tokens,
        "position_ids": list(range(length)),
        "target_ids": tokens[1:] + [0],
        "loss_mask": mask,
        "inference_logprobs": logprobs,
        "advantages": [sample.advantage] * length,
        "loss_weights": [sample.loss_weight] * length,
    }


DTYPES = {"input_ids": torch.long, "position_ids": torch.long, "target_ids": torch.long}
DTYPES |= {"loss_mask": torch.bool}
PREFIX = -1  # segment id of a unit's shared prompt tokens


def sample_tokens(sample: Sample) -> int:
    return len(sample.prompt_ids) + len(sample.completion_ids)


def shared_tokens(unit: list[Sample]) -> int:
    """Tokens of the prompt the unit's samples share: all but the last, whose logits predict
    each sample's own first completion token; 0 for a unit of one."""
    return len(unit[0].prompt_ids) - 1 if len(unit) > 1 else 0


def unit_tokens(unit: list[Sample]) -> int:
    shared = shared_tokens(unit)
    return shared + sum(sample_tokens(s) - shared for s in unit)


def make_micro_batch(items: list) -> MicroBatch:
    """One packed row of `items`: each a Sample, or a list of samples with the same prompt
    that share one copy of it (then the row gets an explicit attention mask)."""
    units = [item if isinstance(item, list) else [item] for item in items]
    columns: dict[str, list] = {}
    sample_ids, unit_ids, segment_ids = [], [], []
    for u, unit in enumerate(units):
        shared = shared_tokens(unit)
        for j, s in enumerate(unit):
            arrays, start = sample_arrays(s), 0 if j == 0 else shared
            length = len(arrays["input_ids"]) - start
            for key, values in arrays.items():
                columns.setdefault(key, []).extend(values[start:])
            prefix = shared - start  # the shared prompt comes with the unit's first sample
            sample_id = sample_ids[-1] + 1 if sample_ids else 0
            segment_ids += [PREFIX] * prefix + [sample_id] * (length - prefix)
            sample_ids += [sample_id] * length
            unit_ids += [u] * length
    out = {k: torch.tensor(v, dtype=DTYPES.get(k, torch.float32)) for k, v in columns.items()}
    out["sample_ids"] = torch.tensor(sample_ids)
    out["input_ids"] = out["input_ids"][None]
    out["position_ids"] = out["position_ids"][None]
    if any(shared_tokens(unit) for unit in units):
        out["attention_mask"] = shared_prompt_mask(
            torch.tensor(unit_ids), torch.tensor(segment_ids)
        )
    return MicroBatch(**out)


def shared_prompt_mask(unit_ids: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """[1, 1, T, T]: position i sees j <= i of its unit, in its own segment or the prompt."""
    length = unit_ids.shape[0]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    same_unit = unit_ids[:, None] == unit_ids[None, :]
    visible = (segment_ids[:, None] == segment_ids[None, :]) | (segment_ids[None, :] == PREFIX)
    return (causal & same_unit & visible)[None, None]


def empty_micro_batch() -> MicroBatch:
    """A one-token row that contributes nothing: keeps ranks in step when they run out."""
    blank = Sample([0], [], [], [], advantage=0.0)
    return make_micro_batch([blank])


def prompt_units(samples: list[Sample], max_tokens: int, step: int, share: bool) -> list[list]:
    """The batch's samples as packing units: with `share`, those with the same prompt together
    (split where a unit would pass `max_tokens`), else one each."""
    families: dict[tuple, list[Sample]] = {}
    for i, s in enumerate(samples):
        if sample_tokens(s) > max_tokens:
            raise BatchError(
                f"batch {step}, sample {i} has {sample_tokens(s)} tokens, more than "
                f"data.micro_batch_tokens / seq_len ({max_tokens}): the orchestrator must "
                "truncate to seq_len, or raise seq_len"
            )
        key = ("prompt", *s.prompt_ids) if share and s.prompt_ids else ("sample", i)
        families.setdefault(key, []).append(s)
    units = []
    for family in families.values():
        units.append([])
        for s in family:
            if units[-1] and unit_tokens([*units[-1], s]) > max_tokens:
                units.append([])
            units[-1].append(s)
    return units


def pack_samples(
    samples: list[Sample], max_tokens: int, step: int, share: bool = False
) -> list[list[list[Sample]]]:
    """First-fit decreasing: rows of units (prompt_units) with at most `max_tokens` tokens,
    each row in the batch's order."""
    units = prompt_units(samples, max_tokens, step, share)
    sizes = [unit_tokens(u) for u in units]
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(units)), key=lambda i: -sizes[i]):
        fit = next((b for b, r in enumerate(room) if r >= sizes[i]), None)
        if fit is None:
            bins.append([])
            room.append(max_tokens)
            fit = len(bins) - 1
        bins[fit].append(i)
        room[fit] -= sizes[i]
    return [[units[i] for i in sorted(b)] for b in bins]


def split_for_ranks(
    batch: Batch, max_tokens: int, rank: int, world_size: int, share: bool = False
) -> list[MicroBatch]:
    """This rank's micro-batches. Every rank gets the same number (blank rows fill up), so
    sharded forward and backward passes stay in lockstep."""
    groups = pack_samples(batch.samples, max_tokens, batch.step, share)
    groups.sort(key=lambda g: -sum(unit_tokens(u) for u in g))
    load, owners = [0] * world_size, []
    for group in groups:  # largest first onto the least loaded rank
        owner = min(range(world_size), key=lambda r: (load[r], r))
        load[owner] += sum(unit_tokens(u) for u in group)
        owners.append(owner)
    num_rows = max(owners.count(r) for r in range(world_size))
    mine = [make_micro_batch(g) for g, owner in zip(groups, owners, strict=True) if owner == rank]
    return mine + [empty_micro_batch() for _ in range(num_rows - len(mine))]
