"""`rl-repeat-word`: "Repeat this word exactly: apple. Answer with just the word."

Reward 1.0 when the answer is the word (case-insensitive), 0.5 when it contains the word.
"""

import verifiers as vf
from datasets import Dataset
from rl_envs import last_answer, seeded_split

QUESTION = "Repeat this word exactly: {word}. Answer with just the word."
WORDS = (
    "apple river stone cloud green horse music paper light table water bread chair smile "
    "tiger ocean honey lemon pilot robot candle garden silver window rocket planet forest "
    "yellow basket winter summer orange mirror button pencil castle dragon spider violin"
).split()


def build_rows() -> list[dict]:
    return [{"question": QUESTION.format(word=word), "answer": word} for word in WORDS]


def exact_word(completion, answer, **kwargs) -> float:
    text = last_answer(completion).lower()
    if text.strip("\"'") == answer:
        return 1.0
    return 0.5 if answer in text else 0.0


def load_environment(seed: int = 0, num_eval_examples: int = 8) -> vf.Environment:
    """The word list shuffled with `seed`; `num_eval_examples` held out for eval."""
    train, evaluation = seeded_split(build_rows(), seed, num_eval_examples)
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(evaluation),
        rubric=vf.Rubric(funcs=[exact_word]),
    )
