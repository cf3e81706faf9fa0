"""`evals --run RUN` says when its own server will compute otherwise than the run's inference
did (another ISA, other dtypes), instead of silently giving other bits."""

import json
import logging
import os

from orchestrator.evals.config import EvalsConfig
from orchestrator.evals.run import note_other_numerics
from rlcore.host.machine import probe


def evals_config(run, **inference):
    return EvalsConfig.model_validate(
        {"run": str(run), "inference": inference, "eval": {"env": [{"id": "rl-add-digits"}]}}
    )


def recorded_run(tmp_path, **choices):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"status": "finished", "numeric_choices": choices}))
    return run


def test_another_isa_is_named(tmp_path, caplog):
    other = "amx" if probe().isa != "amx" else "avx2"
    run = recorded_run(tmp_path, isa=other, **{"inference.model.dtype": "float32"})
    with caplog.at_level(logging.WARNING, logger="orchestrator"):
        note_other_numerics(evals_config(run, model={"dtype": "float32"}), run)
    assert f"isa {other} -> {probe().isa}" in caplog.text
    assert "inference.model.dtype" not in caplog.text  # the same: not named


def test_the_same_numerics_or_an_older_run_say_nothing(tmp_path, caplog):
    run = recorded_run(tmp_path, isa=probe().isa, **{"inference.model.dtype": "float32"})
    older = tmp_path / "older"
    older.mkdir()
    (older / "run.json").write_text(json.dumps({"status": "finished"}))
    with caplog.at_level(logging.WARNING, logger="orchestrator"):
        note_other_numerics(evals_config(run), run)
        note_other_numerics(evals_config(older), older)
        note_other_numerics(evals_config(tmp_path / "missing"), tmp_path / "missing")
    assert caplog.text == ""


def test_a_fifo_or_forged_run_json_is_read_as_untrusted(tmp_path, caplog):
    """run.json is read back through the bounded reader: a FIFO is refused, not waited on (a
    plain read hung here), and a forged value is never printed."""
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "run.json")
    forged = recorded_run(tmp_path, isa="\x1b]52;c;aGk=\x07")
    with caplog.at_level(logging.WARNING, logger="orchestrator"):
        note_other_numerics(evals_config(fifo), fifo)
        note_other_numerics(evals_config(forged), forged)
    assert caplog.text == ""
