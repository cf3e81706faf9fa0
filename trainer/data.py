"""Batches in, micro-batches out.

Consumes `rollouts/step_<n>` (written by the orchestrator, see rlcore.contracts.protocol), waits for
it with a timeout, loads it straight into tensors (`BatchTensors`: all samples' tokens end to end,
cut by `sample_offsets`), and packs its samples into micro-batches of at most
`micro_batch_tokens` tokens. The logit-aligned per-token columns (`token_columns`) are built
once per batch with vectorized ops; a packed row gathers its samples' token ranges from them
by one index tensor, so no per-token Python list is ever built. Samples packed into one row get
position ids that restart at 0, which transformers turns into a block-diagonal causal mask: no
token attends across samples.

With `data.share_prompts`, the samples of one prompt group (the batch's `group_ids`: a group's
rollouts, whose prompts the orchestrator guarantees equal) go in as one unit: the prompt but its
last token once, then one segment per sample (that last token and the completion, positions
continuing the prompt's), under an explicit mask that lets each segment see the shared prompt
and itself. Every logit is what the sample alone would give, for a fraction of the tokens (the
quick start's 32 x 52 tokens become 4 x 36 + 32 x 16).

Packing is deterministic: units in the order of their group's first sample, rows by first-fit
decreasing (ties by unit order), rows onto ranks largest first, each row's samples in batch
order.
"""

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from rlcore.contracts.protocol import BATCH_META, BatchError, BatchTensors, load_batch
from rlcore.processes.poll import wait_until
from trainer.config import FakeDataConfig


def wait_for_batch(folder: Path, timeout_s: float, poll_s: float = 0.2) -> BatchTensors:
    """Load the batch in `folder` once it exists; TimeoutError naming the path otherwise."""
    try:
        wait_until((folder / BATCH_META).exists, timeout_s, poll_s, f"the batch {folder}")
    except TimeoutError:
        raise TimeoutError(
            f"waited {timeout_s:.0f} s for the orchestrator's batch {folder} "
            "(is the orchestrator running with the same output_dir? raise "
            "data.wait_timeout_s if it is just slow)"
        ) from None
    return load_batch(folder)


def fake_batch(
    config: FakeDataConfig, seq_len: int, vocab_size: int, step: int, seed: int
) -> BatchTensors:
    """A synthetic batch of `batch_size` samples of `seq_len` tokens (a quarter prompt), the
    same for the same (seed, step); every completion token is a loss token."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    num_tokens = config.seq_len or seq_len
    num_prompt = max(1, num_tokens // 4)
    num_samples = config.batch_size
    ids, advantages = [], []
    for _ in range(num_samples):  # draws interleaved per sample, as they always were
        ids.append(torch.randint(0, vocab_size, (num_tokens,), generator=gen))
        advantages.append(torch.randn((), generator=gen))
    completion = torch.arange(num_tokens) >= num_prompt
    logprobs = torch.where(completion, torch.tensor(-math.log(vocab_size)), torch.tensor(0.0))
    return BatchTensors(
        step=step,
        temperature=1.0,
        input_ids=torch.cat(ids) if ids else torch.zeros(0, dtype=torch.long),
        policy_mask=completion.repeat(num_samples),
        logprobs=logprobs.repeat(num_samples),
        sample_offsets=torch.arange(num_samples + 1) * num_tokens,
        prompt_lens=torch.full((num_samples,), num_prompt),
        advantages=torch.stack(advantages) if advantages else torch.zeros(0),
        rewards=torch.zeros(num_samples),
        loss_weights=torch.ones(num_samples),
        group_ids=torch.arange(num_samples),
        num_loss_tokens=torch.full((num_samples,), num_tokens - num_prompt),
    )


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
        moved = {k: v.to(device) for k, v in vars(self).items() if v is not None}
        return dataclasses.replace(self, **moved)


ROW_COLUMNS: tuple[str, ...] = ("input_ids", "position_ids", "target_ids", "loss_mask")
ROW_COLUMNS += ("inference_logprobs", "advantages", "loss_weights")


def token_columns(batch: BatchTensors) -> dict[str, torch.Tensor]:
    """The batch's logit-aligned per-token columns ([T] each, `ROW_COLUMNS`): position j of a
    sample holds its token, its position in the sample, the next token of the sample (0 after
    the last), whether that next token is a loss token, its inference logprob, and the sample's
    advantage and loss weight."""
    lengths = batch.lengths
    sample_of_token = torch.repeat_interleave(torch.arange(batch.num_samples), lengths)
    position_ids = torch.arange(batch.num_tokens) - batch.sample_offsets[:-1][sample_of_token]
    last = position_ids == lengths[sample_of_token] - 1  # its logits predict nothing
    loss_mask = torch.roll(batch.policy_mask, -1) & ~last
    loss_mask &= (batch.loss_weights != 0)[sample_of_token]
    next_logprobs = torch.roll(batch.logprobs, -1)
    return {
        "input_ids": batch.input_ids,
        "position_ids": position_ids,
        "target_ids": torch.where(last, 0, torch.roll(batch.input_ids, -1)),
        "loss_mask": loss_mask,
        "inference_logprobs": torch.where(loss_mask, next_logprobs, 0.0),
        "advantages": batch.advantages[sample_of_token],
        "loss_weights": batch.loss_weights[sample_of_token],
    }


PREFIX = -1  # segment id of a unit's shared prompt tokens


@dataclass
class Sizes:
    """Per-sample integers the packer works with (Python ints: one per sample, not per token)."""

    offsets: list[int]
    lengths: list[int]
    prompt_lens: list[int]

    @classmethod
    def of(cls, batch: BatchTensors) -> "Sizes":
        return cls(
            batch.sample_offsets.tolist(), batch.lengths.tolist(), batch.prompt_lens.tolist()
        )

    def shared(self, unit: list[int]) -> int:
        """Tokens of the prompt the unit's samples share: all but the last, whose logits
        predict each sample's own first completion token; 0 for a unit of one."""
        return self.prompt_lens[unit[0]] - 1 if len(unit) > 1 else 0

    def unit_tokens(self, unit: list[int]) -> int:
        shared = self.shared(unit)
        return shared + sum(self.lengths[i] - shared for i in unit)


def prompt_units(
    batch: BatchTensors, sizes: Sizes, max_tokens: int, share: bool
) -> list[list[int]]:
    """The batch's samples (indices) as packing units: with `share`, those of one group
    together (split where a unit would pass `max_tokens`), else one each."""
    too_long = (batch.lengths > max_tokens).nonzero()
    if too_long.numel():
        i = int(too_long[0])
        raise BatchError(
            f"batch {batch.step}, sample {i} has {sizes.lengths[i]} tokens, more than "
            f"data.micro_batch_tokens / seq_len ({max_tokens}): the orchestrator must "
            "truncate to seq_len, or raise seq_len"
        )
    group_ids = batch.group_ids.tolist()
    families: dict[int, list[int]] = {}
    for i in range(batch.num_samples):
        shares = share and sizes.prompt_lens[i] > 0
        families.setdefault(group_ids[i] if shares else -1 - i, []).append(i)
    units: list[list[int]] = []
    for family in families.values():
        units.append([])
        for i in family:
            if units[-1] and sizes.unit_tokens([*units[-1], i]) > max_tokens:
                units.append([])
            units[-1].append(i)
    return units


def pack_units(units: list[list[int]], sizes: Sizes, max_tokens: int) -> list[list[list[int]]]:
    """First-fit decreasing: rows of units with at most `max_tokens` tokens, each row in the
    batch's order."""
    unit_sizes = [sizes.unit_tokens(u) for u in units]
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(units)), key=lambda i: -unit_sizes[i]):
        fit = next((b for b, r in enumerate(room) if r >= unit_sizes[i]), None)
        if fit is None:
            bins.append([])
            room.append(max_tokens)
            fit = len(bins) - 1
        bins[fit].append(i)
        room[fit] -= unit_sizes[i]
    return [[units[i] for i in sorted(b)] for b in bins]


def pack_samples(
    batch: BatchTensors, max_tokens: int, share: bool = False
) -> list[list[list[int]]]:
    """Rows of units (lists of sample indices) with at most `max_tokens` tokens each."""
    sizes = Sizes.of(batch)
    return pack_units(prompt_units(batch, sizes, max_tokens, share), sizes, max_tokens)


def make_micro_batch(
    columns: dict[str, torch.Tensor], sizes: Sizes, units: list[list[int]]
) -> MicroBatch:
    """One packed row of `units` (lists of sample indices; a unit of several carries its first
    sample's prompt once, and the row then gets an explicit attention mask), gathered from the
    batch's `token_columns` by one index tensor."""
    pieces = []  # (first token, tokens, sample in the row, segment, unit), in row order
    sample_id = 0
    for u, unit in enumerate(units):
        shared = sizes.shared(unit)
        for j, i in enumerate(unit):
            start, end = sizes.offsets[i] + (0 if j == 0 else shared), sizes.offsets[i + 1]
            if j == 0 and shared:  # the unit's one copy of the shared prompt
                pieces.append((start, shared, sample_id, PREFIX, u))
                start += shared
            pieces.append((start, end - start, sample_id, sample_id, u))
            sample_id += 1
    starts, lengths, sample_ids, segment_ids, unit_ids = torch.tensor(pieces).unbind(1)
    index = piece_index(starts, lengths)
    row = {name: columns[name][index] for name in ROW_COLUMNS}
    row["input_ids"], row["position_ids"] = row["input_ids"][None], row["position_ids"][None]
    row["sample_ids"] = torch.repeat_interleave(sample_ids, lengths)
    if any(sizes.shared(unit) for unit in units):
        unit_lengths = [sizes.unit_tokens(unit) for unit in units]
        segments = torch.repeat_interleave(segment_ids, lengths)
        row["attention_mask"] = shared_prompt_mask(unit_lengths, segments)
    return MicroBatch(**row)


def piece_index(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """[sum(lengths)]: starts[0], starts[0] + 1, ..., then starts[1], ... (the token ranges
    end to end) without a Python loop."""
    before = torch.cumsum(lengths, 0) - lengths  # where each piece lands in the row
    shift = torch.repeat_interleave(starts - before, lengths)
    return shift + torch.arange(shift.shape[0])


def shared_prompt_mask(unit_lengths: list[int], segment_ids: torch.Tensor) -> torch.Tensor:
    """[1, 1, T, T]: position i sees j <= i of its unit (the row's units lie end to end), in
    its own segment or the unit's shared prompt. Built block by block: nothing is visible
    across units."""
    length = segment_ids.shape[0]
    mask = torch.zeros(length, length, dtype=torch.bool)
    start = 0
    for size in unit_lengths:
        seg = segment_ids[start : start + size]
        visible = seg[:, None] == seg[None, :]
        visible |= (seg == PREFIX)[None, :]
        mask[start : start + size, start : start + size] = visible.tril_()
        start += size
    return mask[None, None]


def empty_micro_batch() -> MicroBatch:
    """A one-token row that contributes nothing: keeps ranks in step when they run out."""
    zero = torch.zeros(1, dtype=torch.long)
    return MicroBatch(
        input_ids=zero[None],
        position_ids=zero[None],
        target_ids=zero,
        loss_mask=torch.zeros(1, dtype=torch.bool),
        inference_logprobs=torch.zeros(1),
        advantages=torch.zeros(1),
        loss_weights=torch.ones(1),
        sample_ids=zero,
    )


def split_for_ranks(
    batch: BatchTensors, max_tokens: int, rank: int, world_size: int, share: bool = False
) -> list[MicroBatch]:
    """This rank's micro-batches. Every rank gets the same number (blank rows fill up), so
    sharded forward and backward passes stay in lockstep."""
    sizes = Sizes.of(batch)
    rows = pack_units(prompt_units(batch, sizes, max_tokens, share), sizes, max_tokens)
    row_tokens = [sum(sizes.unit_tokens(u) for u in row) for row in rows]
    order = sorted(range(len(rows)), key=lambda r: -row_tokens[r])
    load, owners = [0] * world_size, []
    for r in order:  # largest first onto the least loaded rank
        owner = min(range(world_size), key=lambda k: (load[k], k))
        load[owner] += row_tokens[r]
        owners.append(owner)
    num_rows = max(owners.count(k) for k in range(world_size))
    columns = token_columns(batch)
    mine = [
        make_micro_batch(columns, sizes, rows[r])
        for r, owner in zip(order, owners, strict=True)
        if owner == rank
    ]
    return mine + [empty_micro_batch() for _ in range(num_rows - len(mine))]
