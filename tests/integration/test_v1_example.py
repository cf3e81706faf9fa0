"""The shipped v1 example (examples/v1_taskset/rl.toml) runs as the README says, here on the
tiny model for two steps: batches come from the v1 taskset, the trainer's step consumes them
with the logprobs the server sampled (mismatch_kl small), the eval on the eval split runs, and
the rollout archive holds each episode's messages."""

import json

import pytest

from rlcore.contracts import samples_store
from rlcore.runs.rundir import RunDir
from tests.integration.helpers import REPO, free_port, kill_sessions, run_state, start_rl

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_v1_example_trains(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    log = tmp_path / "rl.log"
    flags = [
        "--model.name",
        str(tiny_model_dir),
        "--output-dir",
        str(out),
        "--max-steps",
        "2",
        "--inference.server.port",
        str(free_port()),
        "--orchestrator.batch-size",
        "8",
        "--orchestrator.rollouts-per-example",
        "4",
        "--orchestrator.eval.interval",
        "2",
    ]
    rl = start_rl(REPO / "examples" / "v1_taskset" / "rl.toml", *flags, log=log)
    try:
        code = rl.wait(timeout=900)
    finally:
        kill_sessions({rl.pid, *run_state(out).get("pids", {}).values()})
    assert code == 0, log.read_text()[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    orchestrator = [r for r in records if r["component"] == "orchestrator" and "reward" in r]
    trainer = [r for r in records if r["component"] == "trainer" and "mismatch_kl" in r]
    assert [r["step"] for r in orchestrator] == [0, 1]
    assert all(r["num_errors"] == 0 and r["num_samples"] == 8 for r in orchestrator)
    assert [r["step"] for r in trainer] == [1, 2]
    assert all(r["mismatch_kl"] < 0.05 for r in trainer), trainer
    assert any("eval/rl-add-digits-v1/reward" in r for r in records)
    # the archive keeps each episode's messages from the model's reply on, as for classic envs
    rows = samples_store.read_step(samples_store.step_file(RunDir(out).samples, 1)).to_pylist()
    completions = [json.loads(row["completion"]) for row in rows]
    assert len(rows) == 8 and all(c and c[0]["role"] == "assistant" for c in completions), rows
