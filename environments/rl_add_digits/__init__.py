"""`rl-add-digits`: addition, e.g. "What is 3 + 4? Answer with just the number." One-digit
numbers by default; `digits = 2` asks for sums of two-digit numbers (10-99), which the bundled
SmolLM2-135M gets right far less often (the SFT example warms it up on them).

Reward 1.0 when the last number in the answer is the sum ("7", "3 + 4 = 7."), else 0.0.
"""

import verifiers as vf
from datasets import Dataset
from rl_envs import last_answer, last_integer, seeded_split

QUESTION = "What is {a} + {b}? Answer with just the number."


def build_rows(digits: int = 1) -> list[dict]:
    numbers = range(0 if digits == 1 else 10 ** (digits - 1), 10**digits)
    return [
        {"question": QUESTION.format(a=a, b=b), "answer": str(a + b)}
        for a in numbers
        for b in numbers
    ]


def correct_sum(completion, answer, **kwargs) -> float:
    return 1.0 if last_integer(last_answer(completion)) == int(answer) else 0.0


def load_environment(seed: int = 0, num_eval_examples: int = 20, digits: int = 1) -> vf.Environment:
    """All pairs of `digits`-digit numbers (100 of one digit, 8100 of two), shuffled with
    `seed`; `num_eval_examples` held out for eval."""
    if digits not in (1, 2, 3):
        raise ValueError(f"digits = {digits!r}: give 1, 2 or 3")
    train, evaluation = seeded_split(build_rows(digits), seed, num_eval_examples)
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(evaluation),
        rubric=vf.Rubric(funcs=[correct_sum]),
    )
