"""What an evaluation writes: one results.jsonl line per rollout, and per environment the mean
reward, pass@k (the unbiased estimator of Chen et al. 2021: 1 - C(n - c, k) / C(n, k) per
example, averaged), each metric's mean and the completion tokens; and the table it prints."""

import json
from math import comb
from pathlib import Path
from typing import Any

from rlcore.files.atomic import atomic_write_text


def pass_at_k(num: int, passed: int, k: int) -> float:
    """Probability that at least one of k rollouts drawn from `num` (of which `passed`
    passed) passes."""
    if num - passed < k:
        return 1.0
    return 1.0 - comb(num - passed, k) / comb(num, k)


def env_summary(rows: list[dict[str, Any]], rollouts: int, threshold: float) -> dict[str, Any]:
    """The summary of one environment's result rows (errored rollouts count as failed)."""
    by_example: dict[int, list[dict]] = {}
    for row in rows:
        by_example.setdefault(row["example"], []).append(row)
    rewards = [row["reward"] for row in rows]
    summary: dict[str, Any] = {
        "num_examples": len(by_example),
        "num_rollouts": len(rows),
        "num_errors": sum(row["error"] is not None for row in rows),
        "reward": sum(rewards) / max(len(rewards), 1),
    }
    for k in range(1, rollouts + 1):
        per_example = [
            pass_at_k(len(group), sum(r["reward"] >= threshold for r in group), k)
            for group in by_example.values()
            if len(group) >= k
        ]
        summary[f"pass@{k}"] = sum(per_example) / max(len(per_example), 1)
    names = sorted({name for row in rows for name in row["metrics"]})
    for name in names:
        values = [row["metrics"][name] for row in rows if name in row["metrics"]]
        summary[f"metrics/{name}"] = sum(values) / len(values)
    tokens = [row["completion_tokens"] for row in rows]
    summary["completion_tokens"] = sum(tokens) / max(len(tokens), 1)
    return summary


def eval_labels(ids: list[str]) -> list[str]:
    """Each [[eval.env]]'s name in results and summary: its id, or `id#i` when one id is
    evaluated twice (say with other args)."""
    return [i if ids.count(i) == 1 else f"{i}#{n}" for n, i in enumerate(ids)]


def result_row(env: str, example: int, index: int, rollout: Any) -> dict:
    """The results.jsonl line of one rollout (an orchestrator.envs.Rollout)."""
    return {
        "env": env,
        "example": example,
        "rollout": index,
        "prompt": jsonable(rollout.prompt),
        "completion": jsonable(rollout.completion),
        "reward": rollout.reward,
        "metrics": rollout.metrics,
        "completion_tokens": sum(len(t.completion_ids) for t in rollout.turns),
        "error": rollout.error,
    }


def jsonable(value: Any) -> Any:
    """Chat messages (pydantic models or dicts) as plain JSON values."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def write_results(out: Path, rows: list[dict], summary: dict[str, dict]) -> None:
    """results.jsonl, then summary.json, each whole or not at all (temporary sibling +
    rename): a summary.json that exists says its evaluation is complete."""
    atomic_write_text(out / "results.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")


def read_summary(path: Path) -> dict | None:
    """A complete summary.json's figures; None where it is missing or torn (not a JSON object,
    as a file an older version wrote in place and was interrupted in may be)."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def table(summary: dict[str, dict]) -> str:
    """One line per environment: reward, pass@1, pass@k for the largest k, tokens."""
    lines = [f"{'environment':<28} {'reward':>8} {'pass@1':>8} {'pass@k':>12} {'tokens':>8}"]
    for env, s in summary.items():
        k = max(int(key[5:]) for key in s if key.startswith("pass@"))
        best = f"{s[f'pass@{k}']:.3f} (k={k})"
        lines.append(
            f"{env:<28} {s['reward']:>8.3f} {s['pass@1']:>8.3f} {best:>12} "
            f"{s['completion_tokens']:>8.1f}"
        )
    return "\n".join(lines)
