"""Group-relative advantages: each rollout's reward minus its group's mean reward, optionally
divided by the group's reward standard deviation. Estimators are a plain dict of builders so
another one is one entry more."""

from collections.abc import Callable

import numpy as np

from orchestrator.config import AdvantageConfig

STD_EPS = 1e-6


def group_relative(rewards: list[float], std_normalize: bool) -> list[float]:
    """Advantages of one group of rollouts of the same example; they sum to zero."""
    if not rewards:
        return []
    values = np.asarray(rewards, dtype=np.float64)
    advantages = values - values.mean()
    if std_normalize:
        advantages = advantages / (values.std() + STD_EPS)
    return advantages.tolist()


ESTIMATORS: dict[str, Callable[[list[float], bool], list[float]]] = {
    "group_relative": group_relative,
}


def compute_advantages(rewards: list[float], config: AdvantageConfig) -> list[float]:
    return ESTIMATORS["group_relative"](rewards, config.std_normalize)
