"""Per-rollout sampling seeds for deterministic runs (`deterministic = true`).

Each rollout samples with vLLM's per-request `seed`, derived from (run seed, step, example
draw, rollout index) alone, so the same request draws the same random stream whatever else is
in flight, whichever server answers it and whether the run was resumed. Turn t > 0 of a
multi-turn rollout mixes t in, so its turns do not reuse one stream.
"""

import hashlib

SEED_BITS = 31
"""vLLM takes any int, the OpenAI schema a signed 64-bit one; 31 bits suit every client."""


def derive_seed(*parts: object) -> int:
    """A seed that is a pure function of `parts` (stable across processes and versions)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") % (1 << SEED_BITS)


def rollout_seeds(seed: int, step: int, draw: int, num_rollouts: int) -> list[int]:
    """The seeds of one group: example `draw` (its position in the run's sequence of drawn
    examples, which also tells dynamic-sampling rounds apart) of step `step`."""
    return [derive_seed(seed, "rollout", step, draw, i) for i in range(num_rollouts)]


def eval_seeds(seed: int, step: int, env: int, example: int, num_rollouts: int) -> list[int]:
    return [derive_seed(seed, "eval", step, env, example, i) for i in range(num_rollouts)]


def turn_seed(rollout_seed: int, turn: int) -> int:
    """The seed of a rollout's `turn`-th model call (turn 0 keeps the rollout's own)."""
    return rollout_seed if turn == 0 else derive_seed(rollout_seed, "turn", turn)
