"""`rl-guess-number`: a multi-turn guessing game. The model guesses a secret number; the
environment answers "Higher.", "Lower." or asks again, until the guess is right or
`max_turns` guesses were made.

Reward 1.0 for a right guess on the first turn, 0.5 on a later turn, else 0.0.
Environment turns (user messages) are not model tokens, so they are masked in training.
"""

import verifiers as vf
from datasets import Dataset
from rl_envs import last_answer, last_integer, seeded_split

QUESTION = (
    "I am thinking of a whole number from 1 to {high}. Guess it: answer with just the number. "
    "After each guess I will say higher or lower."
)


def build_rows(high: int, copies: int) -> list[dict]:
    return [
        {"question": QUESTION.format(high=high), "answer": str(secret)}
        for secret in range(1, high + 1)
        for _ in range(copies)
    ]


def parse_guess(text: str) -> int | None:
    """The guess is the last number in the answer ("I guess 3." -> 3)."""
    return last_integer(text)


class GuessNumberEnv(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        guess = parse_guess(last_answer(messages))
        secret = int(state["answer"])
        if guess == secret:
            state["final_env_response"] = [vf.UserMessage(content="Correct!")]
            return state["final_env_response"]
        if guess is None:
            reply = "That is not a number. Answer with just the number."
        else:
            reply = "Higher." if guess < secret else "Lower."
        return [vf.UserMessage(content=reply)]


def guessed(completion, answer, **kwargs) -> float:
    guesses = [
        parse_guess(last_answer([m]))
        for m in completion
        if getattr(m, "role", None) == "assistant"
        or (isinstance(m, dict) and m["role"] == "assistant")
    ]
    for turn, guess in enumerate(guesses):
        if guess == int(answer):
            return 1.0 if turn == 0 else 0.5
    return 0.0


def load_environment(
    high: int = 5, max_turns: int = 2, copies: int = 4, seed: int = 0, num_eval_examples: int = 5
) -> vf.Environment:
    """Secrets 1..`high`, each `copies` times, shuffled with `seed`; at most `max_turns`
    guesses per game."""
    train, evaluation = seeded_split(build_rows(high, copies), seed, num_eval_examples)
    return GuessNumberEnv(
        dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(evaluation),
        rubric=vf.Rubric(funcs=[guessed]),
        max_turns=max_turns,
    )
