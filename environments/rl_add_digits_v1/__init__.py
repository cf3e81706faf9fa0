"""`rl-add-digits-v1`: the one-digit addition task of `rl-add-digits`, written as a verifiers v1
taskset (a `Taskset` of `Task`s with an `@reward`), trained with `[[env]] type = "v1"`.

Reward 1.0 when the last number in the answer is the sum, else 0.0.
"""

import verifiers.v1 as vf
from rl_add_digits import build_rows
from rl_envs import last_integer, seeded_split

__all__ = ["AddDigitsTaskset"]


class AddDigitsData(vf.TaskData):
    answer: int
    """The sum."""


class AddDigitsTask(vf.Task[AddDigitsData]):
    @vf.reward(weight=1.0)
    async def correct_sum(self, trace: vf.Trace) -> float:
        return 1.0 if last_integer(trace.last_reply) == self.data.answer else 0.0


class AddDigitsConfig(vf.TasksetConfig):
    seed: int = 0
    """Shuffles the 100 digit pairs."""
    num_eval_examples: int = 20
    """Pairs held out for evaluation (the last ones after shuffling)."""
    split: str = "train"
    """`train` or `eval`."""


class AddDigitsTaskset(vf.Taskset[AddDigitsTask, AddDigitsConfig]):
    def load(self) -> list[AddDigitsTask]:
        config = self.config
        train, evaluation = seeded_split(build_rows(), config.seed, config.num_eval_examples)
        rows = train if config.split == "train" else evaluation
        return [
            AddDigitsTask(
                AddDigitsData(idx=i, prompt=row["question"], answer=int(row["answer"])),
                self.config.task,
            )
            for i, row in enumerate(rows)
        ]
