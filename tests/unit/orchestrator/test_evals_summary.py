"""What `evals` reports, computed from result rows: pass@k against a count over every subset,
means, errors, and one label per [[eval.env]]."""

from itertools import combinations

import pytest

from orchestrator.evals.config import EvalsConfig
from orchestrator.evals.run import env_labels
from orchestrator.evals.summary import env_summary, pass_at_k, table, write_results


@pytest.mark.parametrize(("num", "passed"), [(4, 0), (4, 1), (4, 3), (5, 2), (6, 6)])
def test_pass_at_k_is_the_share_of_k_subsets_with_a_pass(num, passed):
    outcomes = [True] * passed + [False] * (num - passed)
    for k in range(1, num + 1):
        subsets = list(combinations(outcomes, k))
        assert pass_at_k(num, passed, k) == pytest.approx(sum(map(any, subsets)) / len(subsets))


def test_env_summary_from_rows():
    def row(example, reward, error=None, tokens=4):
        return {
            "example": example,
            "reward": reward,
            "metrics": {"m": reward * 2},
            "completion_tokens": tokens,
            "error": error,
        }

    rows = [row(0, 1.0), row(0, 0.0), row(1, 0.0), row(1, 0.0, error="boom", tokens=0)]
    s = env_summary(rows, rollouts=2, threshold=1.0)
    assert (s["num_examples"], s["num_rollouts"], s["num_errors"]) == (2, 4, 1)
    assert s["reward"] == 0.25 and s["metrics/m"] == 0.5 and s["completion_tokens"] == 3
    assert s["pass@1"] == 0.25 and s["pass@2"] == 0.5  # example 0: 1 of 2; example 1: none
    assert table({"env": s}).splitlines()[1].split() == [
        "env",
        "0.250",
        "0.250",
        "0.500",
        "(k=2)",
        "3.0",
    ]


def test_an_env_evaluated_twice_gets_two_labels():
    config = EvalsConfig.model_validate(
        {"eval": {"env": [{"id": "a"}, {"id": "b"}, {"id": "a", "args": {"digits": 2}}]}}
    )
    assert env_labels(config) == ["a#0", "b", "a#2"]


class Owner:
    """The process that owns a run's W&B run: an RL run's orchestrator (Monitor), or the
    trainer of an SFT run or of a trainer alone (MetricsLogger)."""

    def __init__(self, kind: str, run):
        from rlcore.config.base import WandbConfig

        wandb = {"project": "p", "entity": "e"}
        if kind == "orchestrator":
            from orchestrator.config import OrchestratorConfig
            from orchestrator.monitor import Monitor

            config = OrchestratorConfig(output_dir=run.root, wandb=wandb)
            self.sink = Monitor(config, run, wandb_run_id=None)
            self.finish = self.sink.close
        else:
            from trainer.metrics import MetricsLogger

            self.sink = MetricsLogger(run, WandbConfig(**wandb), {}, owns_wandb=True)
            self.sink.start_wandb(None)
            self.finish = self.sink.finish

    def log(self, step: int) -> None:
        self.sink.log(step, {"loss": 0.5})


@pytest.mark.parametrize("owner", ["orchestrator", "trainer"])
def test_watch_records_reach_the_runs_one_wandb_run(tmp_path, fake_wandb, owner):
    """While the run lives, the owner of its W&B run relays the watch's records; once it has
    ended, the watch continues that same W&B run itself."""
    from orchestrator.evals.watch import RunWandb
    from rlcore.runs.rundir import RunDir

    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    live = Owner(owner, run)
    run.append_metrics("evals", 1, {"add/pass@1": 0.25})
    live.log(1)
    run.append_metrics("evals", 2, {"add/pass@1": 0.5})
    live.finish()  # the run ends: what the watch wrote before is relayed
    after_end = RunWandb(run)
    after_end.log(3, {"add/pass@1": 0.75})
    after_end.finish()

    evals = [
        (d["evals/step"], d["evals/add/pass@1"]) for _, d in fake_wandb.logged if "evals/step" in d
    ]
    assert evals == [(1, 0.25), (2, 0.5), (3, 0.75)]
    first, continued = fake_wandb.inits
    assert continued["id"] == "run-123" and continued["resume"] == "allow"
    assert (
        (continued["project"], continued["entity"])
        == ("p", "e")
        == (first["project"], first["entity"])
    )


def test_watch_of_a_run_without_wandb_starts_none(tmp_path, fake_wandb):
    from orchestrator.evals.watch import RunWandb
    from rlcore.runs.rundir import RunDir

    watched = RunWandb(RunDir(tmp_path))
    watched.log(1, {"add/pass@1": 0.5})
    watched.finish()
    assert fake_wandb.inits == [] and fake_wandb.logged == []


def test_a_torn_summary_is_named_and_its_step_evaluated_again(tmp_path, caplog):
    """A summary.json cut off mid-write (as an in-place write killed half way leaves it) does
    not count as evaluated; a whole one does, and write_results leaves no temporary file."""
    import logging

    from orchestrator.evals.watch import evaluated_steps

    write_results(tmp_path / "step_2", [{"env": "e", "reward": 1.0}], {"e": {"reward": 1.0}})
    (tmp_path / "step_3").mkdir()
    (tmp_path / "step_3" / "summary.json").write_text('{"e": {"reward": 0.5, "pass@1"')
    (tmp_path / "step_4").mkdir()
    (tmp_path / "step_4" / "summary.json").write_text("[1, 2]")  # whole, but not a summary
    with caplog.at_level(logging.WARNING, logger="orchestrator"):
        assert evaluated_steps(tmp_path) == {2}
    assert "step_3/summary.json is torn" in caplog.text and "step 3 again" in caplog.text
    assert sorted(p.name for p in (tmp_path / "step_2").iterdir()) == [
        "results.jsonl",
        "summary.json",
    ]
