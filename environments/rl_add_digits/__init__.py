"""`rl-add-digits`: one-digit addition, e.g. "What is 3 + 4? Answer with just the number."

Reward 1.0 when the last number in the answer is the sum ("7", "3 + 4 = 7."), else 0.0.
"""

import verifiers as vf
from datasets import Dataset
from rl_envs import last_answer, last_integer, seeded_split

QUESTION = "What is {a} + {b}? Answer with just the number."


def build_rows() -> list[dict]:
    return [
        {"question": QUESTION.format(a=a, b=b), "answer": str(a + b)}
        for a in range(10)
        for b in range(10)
    ]


def correct_sum(completion, answer, **kwargs) -> float:
    return 1.0 if last_integer(last_answer(completion)) == int(answer) else 0.0


def load_environment(seed: int = 0, num_eval_examples: int = 20) -> vf.Environment:
    """All 100 pairs of digits, shuffled with `seed`; `num_eval_examples` held out for eval."""
    train, evaluation = seeded_split(build_rows(), seed, num_eval_examples)
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(evaluation),
        rubric=vf.Rubric(funcs=[correct_sum]),
    )
