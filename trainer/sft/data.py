"""SFT data: rows from a file, a saved `datasets` folder or the hub, tokenized with the model's
chat template, a loss mask on the assistant (or completion) tokens, the examples of each step
chosen by (seed, step) alone and packed end to end into passes of at most `tokens` tokens.

A row is `{"messages": [...]}` (every assistant turn is trained on, user, system and tool turns
are not) or `{"prompt": ..., "completion": ...}` (text, or chat messages as in TRL's
conversational format; the completion is trained on). Bad rows fail with `ConfigError` naming
the source, the row and the fix.
"""

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlcore.errors import ConfigError
from rlcore.secrets import redact_message

FILE_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
COLUMNS_FIX = (
    "each row needs `messages` (a list of {role, content}) or `prompt` and `completion` "
    "(text or chat messages)"
)


@dataclass
class Example:
    """One tokenized row: its tokens and which of them are trained on (targets)."""

    ids: list[int]
    targets: list[bool]
    row: int

    @property
    def num_targets(self) -> int:
        return sum(self.targets)


@dataclass
class Counts:
    rows: int = 0
    truncated: int = 0
    dropped_long: int = 0
    dropped_empty: int = 0

    def summary(self, seq_len: int) -> str:
        kept = self.rows - self.dropped_long - self.dropped_empty
        return (
            f"{kept} of {self.rows} rows kept; {self.truncated} cut to seq_len = {seq_len}, "
            f"{self.dropped_long} longer than seq_len left out, {self.dropped_empty} without a "
            "token to train on left out"
        )


def load_rows(name: str, split: str, label: str) -> list[dict]:
    """The rows of `split` of a local file, a `save_to_disk` folder or a hub dataset."""
    import datasets

    datasets.disable_progress_bars()
    path = Path(name).expanduser()
    try:
        if path.is_file():
            kind = FILE_FORMATS.get(path.suffix)
            if kind is None:
                raise ConfigError(
                    f"{label} = {name!r}: a {path.suffix or 'suffix-less'} file; give a "
                    f"{', '.join(FILE_FORMATS)} file or a `save_to_disk` folder"
                )
            if split not in ("train", "all"):
                raise ConfigError(
                    f"{label} = {name!r} is one file, read as the `train` split; split "
                    f"{split!r} needs its own file (set the name of the split's file instead)"
                )
            data = datasets.load_dataset(kind, data_files=str(path), split="train")
        elif path.is_dir():
            data = datasets.load_from_disk(str(path))
            if isinstance(data, datasets.DatasetDict):
                if split not in data:
                    raise ConfigError(
                        f"{label} = {name!r} has no split {split!r} (it has {sorted(data)})"
                    )
                data = data[split]
        else:
            data = datasets.load_dataset(name, split=split)
    except ConfigError:
        raise
    except Exception as err:  # datasets raises many types for a missing or unreadable source
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        what = f"{label} = {name!r} (split {split!r})"
        message = f"{what} could not be read: {first}"
        raise ConfigError(redact_message(message, given=name)) from None  # datasets rewords it
    rows = data.to_list()
    if not rows:
        raise ConfigError(f"{label} = {name!r}: split {split!r} is empty")
    return rows


def tokenize_rows(
    rows: list[dict], tokenizer: Any, seq_len: int, overlong: str, source: str
) -> tuple[list[Example], Counts]:
    """Every usable row as an Example (cut or left out when longer than `seq_len`)."""
    examples, counts = [], Counts(rows=len(rows))
    for i, row in enumerate(rows):
        ids, targets = row_tokens(row, tokenizer, f"{source}, row {i}")
        if len(ids) > seq_len:
            if overlong == "drop":
                counts.dropped_long += 1
                continue
            ids, targets = ids[:seq_len], targets[:seq_len]
            counts.truncated += 1
        if not any(targets[1:]):  # token 0 is never a target: nothing precedes it
            counts.dropped_empty += 1
            continue
        examples.append(Example(ids, targets, i))
    if not examples:
        raise ConfigError(
            f"{source}: no row has a token to train on after cutting to seq_len = {seq_len} "
            f"({counts.summary(seq_len)}); raise seq_len or check the rows"
        )
    return examples, counts


def row_tokens(row: Any, tokenizer: Any, where: str) -> tuple[list[int], list[bool]]:
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: not a table of columns; {COLUMNS_FIX}")
    if row.get("messages") is not None:
        return chat_tokens(row["messages"], tokenizer, where)
    if row.get("prompt") is not None and row.get("completion") is not None:
        prompt, completion = row["prompt"], row["completion"]
        if isinstance(prompt, str) and isinstance(completion, str):
            return text_tokens(prompt, completion, tokenizer)
        if isinstance(prompt, list) and isinstance(completion, list):
            return chat_tokens(prompt + completion, tokenizer, where, train_from=len(prompt))
        raise ConfigError(
            f"{where}: `prompt` and `completion` must both be text or both chat messages"
        )
    present = sorted(k for k, v in row.items() if v is not None)
    raise ConfigError(f"{where}: has columns {present}; {COLUMNS_FIX}")


def text_tokens(prompt: str, completion: str, tokenizer: Any) -> tuple[list[int], list[bool]]:
    """Plain text: the prompt as the tokenizer encodes a text, the completion after it and
    the end-of-sequence token (so the model learns to stop)."""
    prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    if tokenizer.eos_token_id is not None:
        completion_ids = completion_ids + [tokenizer.eos_token_id]
    return prompt_ids + completion_ids, [False] * len(prompt_ids) + [True] * len(completion_ids)


def chat_tokens(
    messages: Any, tokenizer: Any, where: str, train_from: int = 0
) -> tuple[list[int], list[bool]]:
    """A chat through the chat template; the tokens of each assistant turn at or after message
    `train_from` (its end-of-turn token included) are targets."""
    check_messages(messages, where)
    full = render(tokenizer, messages, where)
    targets = [False] * len(full)
    for i, message in enumerate(messages):
        if message["role"] != "assistant" or i < train_from:
            continue
        start = len(render(tokenizer, messages[:i], where, generation_prompt=True))
        upto = render(tokenizer, messages[: i + 1], where)
        if full[: len(upto)] != upto or start > len(upto):
            raise ConfigError(
                f"{where}: the chat template renders turn {i} differently once later turns "
                "follow (it rewrites earlier turns, e.g. drops their reasoning); put one "
                "assistant turn to train on per row"
            )
        targets[start : len(upto)] = [True] * (len(upto) - start)
    return full, targets


def check_messages(messages: Any, where: str) -> None:
    ok = isinstance(messages, list) and bool(messages)
    ok = ok and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in messages)
    if not ok:
        raise ConfigError(f"{where}: chat messages must be a non-empty list of {{role, content}}")
    if not any(m["role"] == "assistant" for m in messages):
        raise ConfigError(f"{where}: no assistant message to train on")


def render(tokenizer: Any, messages: list, where: str, generation_prompt: bool = False):
    try:
        return list(
            tokenizer.apply_chat_template(
                messages,
                tokenize=True,
                add_generation_prompt=generation_prompt,
                return_dict=False,
            )
        )
    except Exception as err:  # the template's own error (jinja), or no template at all
        raise ConfigError(f"{where}: the model's chat template failed: {err}") from None


def step_examples(num: int, batch_size: int, step: int, seed: int, shuffle: bool) -> list[int]:
    """Indices of the examples of optimizer step `step` (1-based): the epochs follow each other,
    each a permutation of all examples seeded by (seed, epoch); a pure function of its inputs."""
    first = (step - 1) * batch_size
    indices = []
    for position in range(first, first + batch_size):
        epoch, offset = divmod(position, num)
        indices.append(epoch_order(num, seed, epoch, shuffle)[offset])
    return indices


def epoch_order(num: int, seed: int, epoch: int, shuffle: bool) -> list[int]:
    order = list(range(num))
    if shuffle:
        random.Random(f"{seed}:{epoch}").shuffle(order)
    return order


@dataclass
class PackedRow:
    """One forward pass: examples end to end. Arrays are aligned with the logits: position j
    is scored against token j + 1 of the same example (`loss_mask` says where)."""

    input_ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T], restarting at 0 for every example
    target_ids: torch.Tensor  # [T]
    loss_mask: torch.Tensor  # [T] bool
    attention_mask: None = None  # examples are told apart by their restarting positions

    def to(self, device: torch.device) -> "PackedRow":
        return PackedRow(
            self.input_ids.to(device),
            self.position_ids.to(device),
            self.target_ids.to(device),
            self.loss_mask.to(device),
        )


def pack(examples: list[Example], tokens: int) -> list[PackedRow]:
    """Examples in order, each row filled until the next would not fit."""
    rows: list[PackedRow] = []
    current: list[Example] = []
    size = 0
    for example in examples:
        if current and size + len(example.ids) > tokens:
            rows.append(packed_row(current))
            current, size = [], 0
        current.append(example)
        size += len(example.ids)
    if current:
        rows.append(packed_row(current))
    return rows


def packed_row(examples: list[Example]) -> PackedRow:
    ids: list[int] = []
    positions: list[int] = []
    targets: list[int] = []
    mask: list[bool] = []
    for ex in examples:
        ids += ex.ids
        positions += range(len(ex.ids))
        targets += ex.ids[1:] + [0]
        mask += ex.targets[1:] + [False]
    return PackedRow(
        torch.tensor([ids]),
        torch.tensor([positions]),
        torch.tensor(targets),
        torch.tensor(mask, dtype=torch.bool),
    )


def empty_row() -> PackedRow:
    """One token without a target: keeps a rank without examples in step with the others."""
    return packed_row([Example([0], [False], -1)])
