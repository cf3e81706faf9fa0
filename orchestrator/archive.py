"""The orchestrator's side of the rollout archive (rlcore.contracts.samples_store): every rollout of
every step into `samples/step_<n>.parquet`, within the bound `[samples]` sets.

Consumes: each step's generated groups (kept, errored and dynamic-sampling-dropped alike) once
the batch is written. Produces: one archive file per step, written by one background thread (the
loop only hands the step over; `flush` waits for it), and, when the archive grows past its
bound, deletes the oldest steps' files (said once). Waits for nothing else. A step whose file
fails is warned about and skipped (training never needs it); a full disk surfaces at the next
step or at `flush` and stops the orchestrator, as for every other write.
"""

import json
import logging
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from orchestrator.config import ARCHIVE_FREE_SHARE, SamplesConfig
from orchestrator.envs import Rollout
from orchestrator.evals.summary import jsonable
from orchestrator.rollouts import extends
from rlcore.contracts import samples_store
from rlcore.files.disk_full import is_disk_full
from rlcore.files.paths import nearest_existing

logger = logging.getLogger("orchestrator")
REPLACEMENT = "\ufffd"
TOKENIZER_FILE = "tokenizer.json"


def default_bound(folder: Path, share: float = ARCHIVE_FREE_SHARE) -> tuple[int, str]:
    """(bytes, how they were chosen) for `share` of the space free where `folder` lives."""
    free = shutil.disk_usage(nearest_existing(folder)).free
    return int(free * share), f"{share:.0%} of the {free / 2**30:.1f} GiB free at start"


def size_text(num_bytes: float) -> str:
    """`1.25 GiB`, or `3.40 MiB` below a hundredth of a GiB."""
    if num_bytes >= 2**30 / 100:
        return f"{num_bytes / 2**30:.2f} GiB"
    return f"{num_bytes / 2**20:.2f} MiB"


def oldest_to_drop(sizes: dict[int, int], bound: int) -> list[int]:
    """The oldest steps whose files must go so that the rest fit in `bound` bytes."""
    total, drop = sum(sizes.values()), []
    for step in sorted(sizes):
        if total <= bound:
            break
        total -= sizes[step]
        drop.append(step)
    return drop


class TokenTexts:
    """Each token id's text, decoded once per id (a dict lookup afterwards). A character split
    over several tokens (each alone decodes to U+FFFD) goes whole to the first of them, the
    others get "": the texts still join to the decoded string. `tokenizer`: a `tokenizers`
    Tokenizer."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def one(self, token: int) -> str:
        text = self.cache.get(token)
        if text is None:
            text = self.cache[token] = self.decode([token])
        return text

    def texts(self, ids: list[int]) -> list[str]:
        texts = [self.one(token) for token in ids]
        i = 0
        while i < len(texts):
            if REPLACEMENT not in texts[i]:
                i += 1
                continue
            end = i + 1
            while end < len(texts) and REPLACEMENT in texts[end]:
                end += 1
            joined = self.decode(ids[i:end])
            if joined.count(REPLACEMENT) < sum(t.count(REPLACEMENT) for t in texts[i:end]):
                texts[i:end] = [joined] + [""] * (end - i - 1)
            i = end
        return texts


def tokenizer_file(model_name: str) -> str | None:
    """The policy's `tokenizer.json`: in its local folder (the bundled model's included), or
    in the Hugging Face cache for a hub name (inference downloaded it); None if neither."""
    from rlcore.host.models import resolve_model

    folder = Path(resolve_model(model_name))
    if (folder / TOKENIZER_FILE).is_file():
        return str(folder / TOKENIZER_FILE)
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model_name, TOKENIZER_FILE)
    return cached if isinstance(cached, str) else None


def load_token_texts(model_name: str) -> TokenTexts | None:
    """The policy's tokenizer through the `tokenizers` library alone (0.5 s and 35 MiB, where
    transformers would import torch into the orchestrator: 0.7 GiB), or None with a warning:
    the archive then has no token text."""
    try:
        path = tokenizer_file(model_name)
        if path is None:
            raise FileNotFoundError(f"no {TOKENIZER_FILE} in its folder or the hub cache")
        from tokenizers import Tokenizer

        return TokenTexts(Tokenizer.from_file(path))
    except Exception as err:  # noqa: BLE001 - the archive then has no token text, nothing more
        logger.warning(
            f"rollout archive: no tokenizer for {model_name!r} ({err}); token_text is left empty"
        )
        return None


def completion_tokens(rollout: Rollout) -> tuple[list[int], list[float], list[bool]]:
    """The completion's tokens across turns: each turn's environment tokens (what its prompt
    adds to the previous turn's context; none where the server re-tokenized that context), then
    the policy's."""
    ids: list[int] = []
    logprobs: list[float] = []
    mask: list[bool] = []
    for i, turn in enumerate(rollout.turns):
        if i and extends(rollout.turns[i - 1], turn):
            prev = rollout.turns[i - 1]
            env_ids = turn.prompt_ids[len(prev.prompt_ids) + len(prev.completion_ids) :]
            ids += env_ids
            logprobs += [0.0] * len(env_ids)
            mask += [False] * len(env_ids)
        ids += turn.completion_ids
        logprobs += turn.completion_logprobs
        mask += [True] * len(turn.completion_ids)
    return ids, logprobs, mask


def rollout_row(
    rollout: Rollout, env: str, group: int, member: int, texts: TokenTexts | None
) -> dict[str, Any]:
    """One archive row (without step and policy_step)."""
    ids, logprobs, mask = completion_tokens(rollout)
    truncated = rollout.is_truncated or any(turn.is_truncated for turn in rollout.turns)
    return {
        "env": env,
        "group": group,
        "member": member,
        "example_id": rollout.example_id,
        "prompt": json.dumps(jsonable(rollout.prompt), default=str),
        "completion": json.dumps(jsonable(rollout.completion), default=str),
        "reward": rollout.reward,
        "reward_parts": json.dumps(rollout.metrics),
        "advantage": rollout.advantage,
        "kept": rollout.advantage is not None,
        "num_prompt_tokens": len(rollout.turns[0].prompt_ids) if rollout.turns else 0,
        "num_completion_tokens": len(ids),
        "is_truncated": truncated,
        "error": rollout.error,
        "token_text": None if texts is None else texts.texts(ids),
        "token_logprob": logprobs,
        "token_mask": mask,
    }


class Archive:
    """Writes each step's file in a background thread and keeps the archive within its bound."""

    def __init__(self, config: SamplesConfig, folder: Path, model_name: str):
        self.folder, self.model_name = folder, model_name
        self.enabled = config.keep
        self.bound = 0
        self.sizes: dict[int, int] = {}
        self.warned = False
        self.texts: TokenTexts | None = None
        self.tokenizer_tried = False
        self.pending: Future | None = None
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="archive")
        self.write_s: list[float] = []
        if not self.enabled:
            logger.info("rollout archive: off (samples.keep = false)")
            return
        if config.max_gib is not None:
            self.bound, how = int(config.max_gib * 2**30), "samples.max_gib"
        else:
            self.bound, how = default_bound(folder)
            how += "; samples.max_gib sets it"
        logger.info(
            f"rollout archive: every rollout to {folder}/step_<n>.parquet, up to "
            f"{size_text(self.bound)} ({how})"
        )

    def drop_from(self, step: int) -> None:
        """Delete the files of steps >= `step` (an attempt regenerates them), then count the
        rest against the bound."""
        for old in samples_store.list_steps(self.folder):
            if old >= step:
                samples_store.remove_step(self.folder, old)
        self.sizes = samples_store.step_sizes(self.folder)

    def submit(
        self, step: int, policy_step: int, env_ids: list[str], groups: list[list[Rollout]]
    ) -> None:
        """Hand one step's groups (`env_ids[i]`: group i's environment) to the writer thread;
        raises the previous write's error, if it failed."""
        if not self.enabled:
            return
        self.flush()
        self.pending = self.executor.submit(self.write, step, policy_step, env_ids, groups)

    def flush(self) -> None:
        """Wait for the step in writing; its error, if any, is raised here."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def write(
        self, step: int, policy_step: int, env_ids: list[str], groups: list[list[Rollout]]
    ) -> None:
        """One step's file; a failure costs that file only (a warning), except a full disk,
        which stops the orchestrator as it stops every other write."""
        try:
            self.write_file(step, policy_step, env_ids, groups)
        except Exception as err:
            if is_disk_full(err):
                raise
            logger.warning(f"rollout archive: step {step} not written: {err!r}")

    def write_file(
        self, step: int, policy_step: int, env_ids: list[str], groups: list[list[Rollout]]
    ) -> None:
        if not self.tokenizer_tried:  # loaded once, off the loop
            self.tokenizer_tried = True
            self.texts = load_token_texts(self.model_name)
        start = time.monotonic()
        rows = [
            rollout_row(rollout, env, g, m, self.texts)
            for g, (env, group) in enumerate(zip(env_ids, groups, strict=True))
            for m, rollout in enumerate(group)
        ]
        self.sizes[step] = samples_store.write_step(self.folder, step, policy_step, rows)
        self.keep_within_bound()
        self.write_s.append(time.monotonic() - start)

    def keep_within_bound(self) -> None:
        drop = oldest_to_drop(self.sizes, self.bound)
        if drop and not self.warned:
            self.warned = True
            logger.warning(
                f"rollout archive: over its bound of {size_text(self.bound)}; deleting the "
                f"oldest steps' files from now on (first: step {drop[0]}); raise "
                "[orchestrator.samples] max_gib to keep more"
            )
        for step in drop:
            samples_store.remove_step(self.folder, step)
            del self.sizes[step]

    def close(self) -> None:
        """Finish the last write and say what writing cost."""
        try:
            self.flush()
        finally:
            self.executor.shutdown(wait=True)
        if self.write_s:
            mean_ms = 1000 * sum(self.write_s) / len(self.write_s)
            logger.info(
                f"rollout archive: {len(self.sizes)} steps, "
                f"{size_text(sum(self.sizes.values()))}; "
                f"{mean_ms:.0f} ms a step to write, in its own thread"
            )
