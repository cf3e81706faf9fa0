"""Turn scored rollouts into training samples: token ids, masks, logprobs, truncation.

A multi-turn rollout becomes ONE sample when every turn's prompt extends the previous turn's
prompt + completion token for token: the environment's tokens in between (user turns, tool
output, chat-template glue) go into the completion with mask 0. When the server re-tokenized
an earlier completion differently, the model really saw other tokens, so each turn becomes
its own sample (exactly what the model saw, nothing trained twice).

The samples of one group of rollouts (one example) that start from the same prompt get one
`group_id` (`assign_groups`), which the batch file carries so that the trainer can pack each
prompt once for all of them without comparing tokens.
"""

import hashlib
import struct
from dataclasses import dataclass

from orchestrator.envs import Rollout, Turn
from rlcore.contracts.protocol import Sample


@dataclass
class Stats:
    """Counters over the samples built from one batch of rollouts."""

    num_truncated: int = 0
    num_split: int = 0
    num_dropped: int = 0


def extends(prev: Turn, turn: Turn) -> bool:
    """Whether `turn`'s prompt starts with `prev`'s prompt and completion, token for token."""
    context = prev.prompt_ids + prev.completion_ids
    return turn.prompt_ids[: len(context)] == context


def rollout_samples(
    rollout: Rollout, advantage: float, seq_len: int, mask_truncated: bool, stats: Stats
) -> list[Sample]:
    """The training samples of one rollout, cut to `seq_len` tokens."""
    if not rollout.turns:
        stats.num_dropped += 1
        return []
    chains = [[rollout.turns[0]]]
    for prev, turn in zip(rollout.turns, rollout.turns[1:], strict=False):
        if extends(prev, turn):
            chains[-1].append(turn)
        else:
            chains.append([turn])
    if len(chains) > 1:
        stats.num_split += 1
    samples = []
    for chain in chains:
        sample = chain_sample(chain, advantage, rollout, seq_len, mask_truncated, stats)
        if sample is None:
            stats.num_dropped += 1
        else:
            samples.append(sample)
    return samples


def chain_sample(
    chain: list[Turn],
    advantage: float,
    rollout: Rollout,
    seq_len: int,
    mask_truncated: bool,
    stats: Stats,
) -> Sample | None:
    """One sample from turns that extend each other; None if the prompt alone fills seq_len."""
    prompt_ids = chain[0].prompt_ids
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for turn in chain:
        env_ids = turn.prompt_ids[len(prompt_ids) + len(ids) :]
        ids += env_ids + turn.completion_ids
        mask += [0] * len(env_ids) + [1] * len(turn.completion_ids)
        logprobs += [0.0] * len(env_ids) + turn.completion_logprobs
    truncated = rollout.is_truncated or any(turn.is_truncated for turn in chain)
    room = seq_len - len(prompt_ids)
    if room <= 0:
        return None
    if len(ids) > room:
        ids, mask, logprobs, truncated = ids[:room], mask[:room], logprobs[:room], True
    stats.num_truncated += truncated
    return Sample(
        prompt_ids=list(prompt_ids),
        completion_ids=ids,
        completion_mask=mask,
        completion_logprobs=logprobs,
        advantage=advantage,
        reward=rollout.reward,
        loss_weight=0.0 if truncated and mask_truncated else 1.0,
    )


def assign_groups(samples: list[Sample], first_id: int) -> int:
    """Number the distinct prompts among one group's `samples` from `first_id` on (samples with
    the same prompt share an id; a multi-turn rollout split into chains has later prompts of its
    own); returns the next free id."""
    ids: dict[tuple[int, ...], int] = {}
    for sample in samples:
        sample.group_id = ids.setdefault(tuple(sample.prompt_ids), first_id + len(ids))
    return first_id + len(ids)


def batch_digests(samples: list[Sample]) -> dict[str, str]:
    """Short digests of what a batch gives the trainer, for a deterministic run's metrics.jsonl:
    the token ids (prompts, completions, masks) and, apart, the engine's logprobs of them. When
    two runs with one seed part, these say which side parted first: a different sampled token,
    the same tokens with other logprobs (the inference engine), or neither (the trainer)."""
    tokens, logprobs = hashlib.sha256(), hashlib.sha256()
    for sample in samples:
        ids = (len(sample.prompt_ids), *sample.prompt_ids, *sample.completion_ids)
        tokens.update(struct.pack(f"<{len(ids)}q", *ids))
        tokens.update(bytes(sample.completion_mask))
        logprobs.update(
            struct.pack(f"<{len(sample.completion_logprobs)}d", *sample.completion_logprobs)
        )
    return {"tokens_digest": tokens.hexdigest()[:16], "logprobs_digest": logprobs.hexdigest()[:16]}
