"""Dynamic sampling (DAPO): a group whose rollouts all got the same reward has zero advantage
everywhere, so it teaches nothing and only dilutes the step's loss (which is normalised by the
batch's token count). With `dynamic_sampling.enabled`, such groups are left out and more
examples are sampled, round after round, until the batch holds `batch_size // rollouts_per_example`
informative groups or `max_rounds` rounds have run.

Consumes: a `sample(num_groups)` coroutine that draws examples and generates their groups.
Produces: the groups to train on, plus every generated group and pick (for the step's reward
and per-environment metrics, which describe the policy, not the filter).
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from orchestrator.config import DynamicSamplingConfig
from orchestrator.envs import Rollout

Picks = list[tuple[int, int]]
SampleGroups = Callable[[int], Awaitable[tuple[Picks, list[list[Rollout]]]]]


@dataclass
class SampledGroups:
    picks: Picks
    """Every (environment, example) drawn this step, in generation order."""
    groups: list[list[Rollout]]
    """Every generated group, aligned with `picks`."""
    kept: list[list[Rollout]]
    """The groups the batch is built from."""
    num_rounds: int = 1

    def metrics(self) -> dict[str, float]:
        return {
            "num_skipped_groups": len(self.groups) - len(self.kept),
            "num_generation_rounds": self.num_rounds,
        }


def is_informative(group: list[Rollout]) -> bool:
    """Some of the group's usable rollouts scored differently: nonzero advantages."""
    rewards = {r.reward for r in group if r.turns and r.error is None}
    return len(rewards) > 1


async def sample_batch(
    num_groups: int, sample: SampleGroups, config: DynamicSamplingConfig
) -> SampledGroups:
    """`num_groups` groups; with dynamic sampling only informative ones, generating more (as
    many as are missing) for up to `max_rounds` rounds. When the rounds run out the batch is
    what was found; with no informative group at all, the last round's groups (a step that
    changes nothing rather than an empty batch)."""
    picks, groups = await sample(num_groups)
    result = SampledGroups(picks, groups, kept=groups)
    if not config.enabled:
        return result
    result.kept = [g for g in groups if is_informative(g)]
    last = groups
    while len(result.kept) < num_groups and result.num_rounds < config.max_rounds:
        picks, last = await sample(num_groups - len(result.kept))
        result.picks += picks
        result.groups += last
        result.kept += [g for g in last if is_informative(g)]
        result.num_rounds += 1
    if not result.kept:
        result.kept = last
    return result
