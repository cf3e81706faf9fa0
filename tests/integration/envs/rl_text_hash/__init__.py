"""`rl-text-hash`, a test environment: the quick start's addition prompts, rewarded by a hash of
the answers' text (0 .. 1). A tiny random model never answers a sum right, so `rl-add-digits`
gives it zero advantages and nothing to train on; this reward differs between any two different
answers, so every step trains and any change in a sampled token shows in reward and loss (the
determinism tests).

It is multi-turn (`max_turns`, default 2) and draws randomness the way an environment should:
after each answer it asks to add a number drawn from the rollout's own `state["rng"]`, so the
environment's tokens (masked in training, but seen by the model) differ between seeds and
agree between runs only if that generator is seeded per rollout. Importable when
tests/integration/envs is on PYTHONPATH."""

import hashlib

import verifiers as vf
from datasets import Dataset
from rl_add_digits import build_rows
from rl_envs import last_answer, seeded_split


class TextHashEnv(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        return [vf.UserMessage(content=f"Now add {state['rng'].randint(0, 99)}.")]


def text_hash(completion, **kwargs) -> float:
    digest = hashlib.sha256(last_answer(completion).encode()).digest()
    return digest[0] / 255


def load_environment(seed: int = 0, num_eval_examples: int = 20, max_turns: int = 2):
    train, evaluation = seeded_split(build_rows(), seed, num_eval_examples)
    return TextHashEnv(
        dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(evaluation),
        rubric=vf.Rubric(funcs=[text_hash]),
        max_turns=max_turns,
    )
