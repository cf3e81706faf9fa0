"""Every family vLLM serves on CPU trains: a 2-step synchronous fp32 `rl` run on a tiny random
model of the family (tests/families.py: head bias, logit scales and softcaps, attention softcap
and sliding window all visibly in play) passes the step-1 parity check with mismatch_kl <= 1e-3."""

import json
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import free_port, kill_sessions, start_rl, tiny_rl_toml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from families import FAMILIES, save_family_model  # noqa: E402

from tests.integration.test_rl import run_sessions  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("family", FAMILIES)
def test_two_steps_pass_the_parity_check(family, tmp_path):
    model = save_family_model(family, tmp_path / "model")
    out, config = tmp_path / "run", tmp_path / "rl.toml"
    text = tiny_rl_toml(model, out, free_port(), max_steps=2).replace(
        "async_level = 1", "async_level = 0"
    )
    config.write_text(text)
    log = tmp_path / "rl.log"
    rl = start_rl(config, log=log)
    try:
        code = rl.wait(timeout=900)
    finally:
        kill_sessions(run_sessions(out, rl.pid))
    trainer_log = (out / "logs" / "trainer.log").read_text()
    assert code == 0, log.read_text()[-3000:] + trainer_log[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    kls = [r["mismatch_kl"] for r in records if r["component"] == "trainer"]
    print(f"{family}: mismatch_kl per step {kls}")
    assert len(kls) == 2 and kls[0] <= 1e-3, kls
    assert "parity check passed" in trainer_log
