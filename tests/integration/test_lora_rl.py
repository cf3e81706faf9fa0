"""`rl` with LoRA on CPU and the tiny model: every published step is a small adapter that
inference serves by name (the orchestrator's policy_step advances), and a resumed attempt's
parity check passes with a trained adapter, so vLLM's LoRA computes the trainer's logprobs."""

import json
import re

import pytest

from rlcore.runs.rundir import RunDir
from tests.integration.helpers import free_port, kill_sessions, run_state, start_rl, tiny_rl_toml

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LORA = "\n[trainer.lora]\nrank = 8\nalpha = 16.0\n[trainer.optim]\nlr = 1e-3\n"


def run_rl(config, log, *flags) -> str:
    rl = start_rl(config, *flags, log=log)
    try:
        code = rl.wait(timeout=900)
        text = log.read_text()
        assert code == 0, text
    finally:
        kill_sessions({rl.pid, *run_state(config.parent / "run").get("pids", {}).values()})
    return text


def orchestrator_records(run: RunDir) -> list[dict]:
    lines = run.metrics.read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["component"] == "orchestrator"]


def test_lora_run_serves_adapters_and_resumes(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    config = tmp_path / "rl.toml"
    toml = tiny_rl_toml(tiny_model_dir, out, free_port(), max_steps=3).replace(
        "[trainer.optim]\nlr = 1e-4\n", ""
    )
    config.write_text(toml + LORA)
    run_rl(config, tmp_path / "rl1.log")
    run = RunDir(out)
    base_bytes = (tiny_model_dir / "model.safetensors").stat().st_size
    adapter = run.weight_dir(3)
    assert sorted(p.name for p in adapter.iterdir()) == [
        "STABLE",
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert (adapter / "adapter_model.safetensors").stat().st_size < base_bytes / 10
    policy_steps = [r["policy_step"] for r in orchestrator_records(run)]
    assert policy_steps == sorted(policy_steps) and policy_steps[-1] >= 1, policy_steps
    inference_log = run.log_file("inference").read_text()
    # the first adapter served is step 1, or step 2 when the trainer was quicker than the poll
    served = re.findall(r"now serving (\S+)/step_(\d+)", inference_log)
    assert served and int(served[0][1]) >= 1, inference_log[-2000:]
    assert served[0][0] == str(run.weights.resolve())

    log = run_rl(config, tmp_path / "rl2.log", "--ckpt.resume-step", "-1", "--max-steps", "5")
    assert "resuming from step 3" in log
    trainer_log = run.log_file("trainer").read_text().split("===== attempt")[-1]
    assert "parity check passed" in trainer_log  # with the step-3 adapter serving
    assert run.weights_stable(5) and run.latest_checkpoint() == 5
    assert [r["policy_step"] for r in orchestrator_records(run)][-2:] == [3, 3]
