"""Which example comes next: environments mixed by weight, each walked in a seeded order.

Every choice is a pure function of (seed, counters), so the whole sampling position is a few
integers: a checkpoint stores them and a resumed run draws exactly the same sequence.
"""

import random
from dataclasses import dataclass, field


@dataclass
class SamplerState:
    num_drawn: int = 0
    """Examples drawn so far across all environments."""

    env_counts: list[int] = field(default_factory=list)
    """Examples drawn so far from each environment."""


class ExampleSampler:
    def __init__(
        self,
        sizes: list[int],
        weights: list[float],
        seed: int,
        state: SamplerState | None = None,
    ):
        assert len(sizes) == len(weights) and all(n > 0 for n in sizes), (sizes, weights)
        self.sizes = sizes
        self.weights = weights
        self.seed = seed
        self.state = state or SamplerState()
        if not self.state.env_counts and not self.state.num_drawn:
            self.state.env_counts = [0] * len(sizes)
        assert len(self.state.env_counts) == len(sizes), "checkpoint has another env list"

    def next(self) -> tuple[int, int]:
        """(environment index, example index within it) of the next example."""
        draw = random.Random(f"{self.seed}:env:{self.state.num_drawn}")
        env = draw.choices(range(len(self.sizes)), weights=self.weights)[0]
        count, size = self.state.env_counts[env], self.sizes[env]
        epoch, position = divmod(count, size)
        order = list(range(size))
        random.Random(f"{self.seed}:order:{env}:{epoch}").shuffle(order)
        self.state.num_drawn += 1
        self.state.env_counts[env] += 1
        return env, order[position]

    def take(self, num: int) -> list[tuple[int, int]]:
        return [self.next() for _ in range(num)]
