"""What `evals` reports, computed from result rows: pass@k against a count over every subset,
means, errors, and one label per [[eval.env]]."""

from itertools import combinations

import pytest

from orchestrator.evals.config import EvalsConfig
from orchestrator.evals.run import env_labels
from orchestrator.evals.summary import env_summary, pass_at_k, table


@pytest.mark.parametrize(("num", "passed"), [(4, 0), (4, 1), (4, 3), (5, 2), (6, 6)])
def test_pass_at_k_is_the_share_of_k_subsets_with_a_pass(num, passed):
    outcomes = [True] * passed + [False] * (num - passed)
    for k in range(1, num + 1):
        subsets = list(combinations(outcomes, k))
        assert pass_at_k(num, passed, k) == pytest.approx(sum(map(any, subsets)) / len(subsets))


def test_env_summary_from_rows():
    def row(example, reward, error=None, tokens=4):
        return {"example": example, "reward": reward, "metrics": {"m": reward * 2},
                "completion_tokens": tokens, "error": error}  # fmt: skip

    rows = [row(0, 1.0), row(0, 0.0), row(1, 0.0), row(1, 0.0, error="boom", tokens=0)]
    s = env_summary(rows, rollouts=2, threshold=1.0)
    assert (s["num_examples"], s["num_rollouts"], s["num_errors"]) == (2, 4, 1)
    assert s["reward"] == 0.25 and s["metrics/m"] == 0.5 and s["completion_tokens"] == 3
    assert s["pass@1"] == 0.25 and s["pass@2"] == 0.5  # example 0: 1 of 2; example 1: none
    assert table({"env": s}).splitlines()[1].split() == ["env", "0.250", "0.250", "0.500", "(k=2)",
                                                         "3.0"]  # fmt: skip


def test_an_env_evaluated_twice_gets_two_labels():
    config = EvalsConfig.model_validate(
        {"eval": {"env": [{"id": "a"}, {"id": "b"}, {"id": "a", "args": {"digits": 2}}]}}
    )
    assert env_labels(config) == ["a#0", "b", "a#2"]
