"""`rl-text-hash`, a test environment: the quick start's addition prompts, rewarded by a hash of
the answer's text (0 .. 1). A tiny random model never answers a sum right, so `rl-add-digits`
gives it zero advantages and nothing to train on; this reward differs between any two different
answers, so every step trains and any change in a sampled token shows in reward and loss (the
determinism tests). Importable when tests/integration/envs is on PYTHONPATH."""

import hashlib

import verifiers as vf
from datasets import Dataset
from rl_add_digits import build_rows
from rl_envs import last_answer, seeded_split


def text_hash(completion, **kwargs) -> float:
    digest = hashlib.sha256(last_answer(completion).encode()).digest()
    return digest[0] / 255


def load_environment(seed: int = 0, num_eval_examples: int = 20) -> vf.Environment:
    train, evaluation = seeded_split(build_rows(), seed, num_eval_examples)
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(evaluation),
        rubric=vf.Rubric(funcs=[text_hash]),
    )
