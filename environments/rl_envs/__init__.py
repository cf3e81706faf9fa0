"""Helpers shared by the bundled environments (`rl_add_digits`, `rl_repeat_word`,
`rl_guess_number`): answer parsing and small seeded datasets built in code."""

import random
import re
from typing import Any

_INTEGER = re.compile(r"-?\d+")

ENV_IDS = ("rl-add-digits", "rl-repeat-word", "rl-guess-number")


def last_answer(completion: Any) -> str:
    """Text of the last assistant message, stripped of whitespace and a trailing period."""
    if isinstance(completion, str):
        text = completion
    else:
        texts = [_content(m) for m in completion or [] if _role(m) == "assistant"]
        text = texts[-1] if texts else ""
    return text.strip().rstrip(".").strip()


def last_integer(text: str) -> int | None:
    """The last whole number written in `text` ("3 + 4 = 7." -> 7), or None."""
    found = _INTEGER.findall(text)
    return int(found[-1]) if found else None


def _role(message: Any) -> str | None:
    return message.get("role") if isinstance(message, dict) else getattr(message, "role", None)


def _content(message: Any) -> str:
    content = (
        message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
    )
    return content if isinstance(content, str) else ""


def seeded_split(rows: list[dict], seed: int, num_eval: int) -> tuple[list[dict], list[dict]]:
    """Shuffle `rows` with `seed` and split off the last `num_eval` rows as the eval set."""
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    num_eval = min(num_eval, len(rows) // 2)
    return rows[: len(rows) - num_eval], rows[len(rows) - num_eval :]
