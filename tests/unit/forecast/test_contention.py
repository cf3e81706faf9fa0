"""An async run's contention on shared cores, measured by the machine's finished runs
(rlcore/forecast/contention.py): a run's steady step over its estimate's phases added up, kept
under the calibration's fingerprint, pooled, read back as data (a damaged record is no record),
taken by the next estimate on that machine and said in its basis; GPU and sync runs neither
take nor keep it."""

import json
import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from known_speeds import FLAT, SMALL

from rlcore.forecast import contention, model, progress
from rlcore.forecast.model import Job
from rlcore.host.models import CACHE_ENV

FINGERPRINT = "4b6c73f20e8666da"
KEY = f"{FINGERPRINT}-p8"
PHASES = {"generate": 2.0, "wait": 4.0, "train": 3.0, "publish": 1.0}


@pytest.mark.parametrize(
    ("params", "decade", "words"),
    [(0, 0, "1-10"), (999, 2, "100-1K"), (134_515_008, 8, "100M-1B"), (7 * 10**9, 9, "1B-10B")],
)
def test_a_figure_is_kept_per_machine_and_decade_of_parameters(params, decade, words):
    assert contention.key(FINGERPRINT, params) == f"{FINGERPRINT}-p{decade}"
    assert contention.KEY.fullmatch(contention.key(FINGERPRINT, params))
    assert contention.size_words(params) == words


def test_a_runs_figure_is_its_steady_step_over_its_phases_added_up():
    assert contention.measure({"phases_s": PHASES}, 9.0) == pytest.approx(1.5)  # 9 / (2+3+1)
    assert contention.measure({"phases_s": PHASES}, 12.0) == pytest.approx(2.0)
    assert contention.measure({"phases_s": PHASES}, 30.0) is None  # x5: something else ran
    assert contention.measure({"phases_s": PHASES}, 2.4) is None  # x0.4: not this
    assert contention.measure({"phases_s": PHASES}, None) is None
    for damaged in (None, [], {"phases_s": []}, {"phases_s": {**PHASES, "train": "3"}}):
        assert contention.measure(damaged, 9.0) is None
    assert contention.measure({"phases_s": {**PHASES, "train": math.inf}}, 9.0) is None
    assert contention.measure({"phases_s": {**PHASES, "generate": True}}, 9.0) is None
    assert (
        contention.measure({"phases_s": {"generate": 0.0, "train": 0.0, "publish": 0}}, 9.0) is None
    )


def test_a_figure_is_kept_pooled_and_read_back_by_hand(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert contention.recall(KEY) is None
    contention.remember(KEY, 1.6)
    assert contention.recall(KEY) == contention.Contention(1.6, 1)
    contention.remember(KEY, 1.2)  # the first run counts once
    assert contention.recall(KEY) == contention.Contention(pytest.approx(1.4), 2)
    for _ in range(3):
        contention.remember(KEY, 2.0)
    found = contention.recall(KEY)
    # runs 3, 4, 5: the earlier ones count 2, then 3, then 3 times the new one
    expected = (1.4 * 2 + 2.0) / 3
    expected = (expected * 3 + 2.0) / 4
    expected = (expected * 3 + 2.0) / 4
    assert found is not None and found.runs == 5 and found.factor == pytest.approx(expected, 1e-3)
    contention.remember(KEY, None)  # a run that measured nothing changes nothing
    assert contention.recall(KEY) == found


@pytest.mark.parametrize(
    "record",
    [
        [],
        {"version": 3, "factor": 1.5, "runs": 1},
        {"version": 1, "factor": 1.5, "runs": 1},  # before records were kept per model size
        {"version": 2, "factor": "1.5", "runs": 1},
        {"version": 2, "factor": math.nan, "runs": 1},
        {"version": 2, "factor": 0.1, "runs": 1},
        {"version": 2, "factor": 40.0, "runs": 1},
        {"version": 2, "factor": True, "runs": 1},
        {"version": 2, "factor": 1.5, "runs": 0},
        {"version": 2, "factor": 1.5, "runs": True},
        {"version": 2, "factor": 1.5, "runs": 10**9},
        {"version": 2, "factor": 1.5},
    ],
)
def test_a_damaged_record_is_no_record_and_the_next_run_replaces_it(tmp_path, monkeypatch, record):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    path = contention.contention_file(KEY)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record).replace("NaN", "NaN"))
    assert contention.recall(KEY) is None
    contention.remember(KEY, 1.3)
    assert contention.recall(KEY) == contention.Contention(1.3, 1)


def test_a_file_the_bounded_reader_refuses_is_no_record(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    path = contention.contention_file(KEY)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)  # read as a file, it would block forever
    assert contention.recall(KEY) is None
    path.unlink()
    path.write_bytes(b'{"version": 2, "factor": 1.5, "runs": 1, "x": "' + b"a" * 100_000 + b'"}')
    assert contention.recall(KEY) is None


@pytest.mark.parametrize(
    "key",
    [
        "",
        "../../x",
        "abc",
        "4B6C73F20E8666DA-p8",
        "4b6c73f2/0e8666da-p8",
        FINGERPRINT,  # no size
        f"{FINGERPRINT}-p8/../x",
        f"{FINGERPRINT}-p123",
    ],
)
def test_a_key_that_is_no_fingerprint_reads_and_writes_nothing(tmp_path, monkeypatch, key):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    contention.remember(key, 1.5)
    assert contention.recall(key) is None
    assert not (tmp_path / "cache").exists()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 10.0), min_size=1, max_size=12))
def test_the_kept_figure_stays_within_what_the_runs_measured(tmp_path_factory, figures):
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("cache"))
    try:
        kept = [f for f in figures if contention.within(f) is not None]
        for figure in figures:
            contention.remember(KEY, contention.within(figure))
        found = contention.recall(KEY)
        if not kept:
            assert found is None
        else:
            assert found is not None and found.runs == len(kept)
            assert min(kept) - 1e-3 <= found.factor <= max(kept) + 1e-3
    finally:
        del os.environ[CACHE_ENV]


def test_an_async_cpu_step_takes_the_machines_figure_by_hand():
    job = Job(max_steps=4, rollouts=4, answer_tokens=8)
    phases = model.step_phases(job, SMALL, FLAT, 8.0)
    added = phases["generate"] + phases["train"] + phases["publish"]
    assert phases["step"] == pytest.approx(model.SHARED_CORES_CONTENTION * added)
    kept = Job(max_steps=4, rollouts=4, answer_tokens=8, contention=1.6)
    measured = model.step_phases(kept, SMALL, FLAT, 8.0)
    assert measured["step"] == pytest.approx(1.6 * added)


def test_a_finished_runs_steady_step_leaves_out_the_last_which_trains_alone():
    clock = progress.Progress(max_steps=4, estimated_step_s=10.0, untrained_batches=2)
    for done, at in ((1, 20.0), (2, 35.0), (3, 50.0), (4, 54.0)):
        clock.step_done(done, at)
    for done, at in ((1, 5.0), (2, 8.0), (3, 24.0), (4, 39.0)):
        clock.batch_done(done, at)
    assert clock.steady_s() == pytest.approx(15.0)  # 15, 15 (trainer), 16, 15 (batches)
    assert progress.Progress(4, 10.0).steady_s() is None


def test_the_launcher_keeps_an_async_cpu_runs_figure_for_the_next_estimate(tmp_path, monkeypatch):
    from launcher.eta import RunClock

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    forecast = model.estimate(Job(max_steps=4, rollouts=4, trainer_peak=1.0), SMALL, FLAT)
    forecast.contention_key = KEY
    clock = RunClock(forecast, max_steps=4, components=["trainer", "orchestrator"])
    phases = forecast.record()["phases_s"]
    added = phases["generate"] + phases["train"] + phases["publish"]
    start = clock.started
    for done in range(1, 5):  # steps of 1.5x the phases added up, the last one alone
        clock.progress.step_done(done, start + 10 + 1.5 * added * done - (done == 4) * added)
    (tmp_path / "run").mkdir()
    clock.finish(tmp_path / "run")
    assert contention.recall(KEY) == contention.Contention(pytest.approx(1.5, 1e-3), 1)
    forecast.contention_key = ""  # a GPU or sync run keeps nothing
    other = RunClock(forecast, max_steps=4, components=["trainer", "orchestrator"])
    for done in range(1, 5):
        other.progress.step_done(done, start + 3.0 * added * done)
    other.finish(tmp_path / "run")
    assert contention.recall(KEY).runs == 1


@pytest.mark.parametrize("async_level", [1, 0])
def test_the_next_estimate_on_the_machine_takes_and_says_the_kept_figure(
    tmp_path, monkeypatch, tiny_model_dir, async_level
):
    from dataclasses import replace

    import launcher.forecast
    from launcher.forecast import forecast
    from launcher.prepare import build_plan
    from launcher.rl_config import RLConfig
    from rlcore.forecast import report

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    config = RLConfig.model_validate(
        {"model": {"name": str(tiny_model_dir)}, "trainer": {"async_level": async_level}}
    )
    plan = build_plan(config, dry_run=True)
    rates = {"float32": 1e9, "bfloat16": 1e9}
    speeds = replace(FLAT, matmul_flops=rates, stream_bytes=rates, fingerprint=FINGERPRINT)
    monkeypatch.setattr(report, "speeds", lambda *a: speeds)
    monkeypatch.setattr(launcher.forecast, "shared", lambda machine: (1.0, []))  # no load
    monkeypatch.setenv("RL_CALIBRATION", "on")
    before, lines = forecast(plan)
    shape, _ = report.shape_of(str(tiny_model_dir))
    size_key = contention.key(FINGERPRINT, shape.params)
    contention.remember(f"{FINGERPRINT}-p{contention.decade(shape.params) + 2}", 2.5)  # another
    assert forecast(plan)[0].step_s == before.step_s  # size's figure is not this one's
    contention.remember(size_key, 1.6)
    after, kept_lines = forecast(plan)
    assert before is not None and after is not None
    if async_level == 0:  # one phase after the other: its own pace, not the contention
        assert after.step_s == before.step_s and after.contention_key == f"{size_key}-sync"
        assert not any("async steps" in line for line in kept_lines)
        assert "steps as modelled; a finished run with async 0 of models" in "\n".join(lines)
        contention.remember(f"{size_key}-sync", 1.2)
        paced, paced_lines = forecast(plan)
        assert paced.step_s == pytest.approx(1.2 * before.step_s)
        assert (
            "  basis: steps x1.20 the phases added up, as the last finished run with async 0"
            in ("\n".join(paced_lines))
        )
        return
    assert after.step_s == pytest.approx(before.step_s * 1.6 / model.SHARED_CORES_CONTENTION)
    assert before.contention_key == after.contention_key == size_key
    assert "  basis: async steps: generation and training added up x1.25 (they share the " in (
        "\n".join(lines)
    )
    size = contention.size_words(shape.params)
    said = f"x1.60 (they share the cores), as the last finished async run of models of {size} "
    assert said in "\n".join(kept_lines)


def test_an_sft_estimate_takes_the_machines_sft_pace_and_its_run_keeps_it(
    tmp_path, monkeypatch, tiny_model_dir
):
    from dataclasses import replace

    from launcher.eta import RunClock
    from rlcore.forecast import report
    from trainer.sft.config import SFTConfig

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("RL_CALIBRATION", "on")
    monkeypatch.setattr(report, "speeds", lambda *a: replace(FLAT, fingerprint=FINGERPRINT))
    monkeypatch.setattr(report, "shared", lambda machine: (1.0, []))  # no load
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "x", "completion": "y"}) + "\n")
    config = SFTConfig.model_validate(
        {"model": {"name": str(tiny_model_dir)}, "data": {"name": str(data)}, "max_steps": 6}
    )
    before, lines = report.sft_forecast(config, 40.0)
    assert before is not None and before.contention_key.endswith("-sft")
    assert "steps as modelled; a finished sft run of models" in "\n".join(lines)
    clock = RunClock(before, max_steps=6, components=["sft"])
    train = before.record()["phases_s"]["train"]
    for done in range(1, 7):  # steps of 1.3x the modelled training, the last with a validation
        clock.progress.step_done(done, clock.started + 5 + 1.3 * train * done + (done == 6) * 9)
    (tmp_path / "run").mkdir()
    clock.finish(tmp_path / "run")
    assert contention.recall(before.contention_key) == contention.Contention(
        pytest.approx(1.3, 1e-3), 1
    )
    after, after_lines = report.sft_forecast(config, 40.0)
    assert after.step_s == pytest.approx(1.3 * before.step_s)
    assert "steps x1.30 the phases added up, as the last finished sft run of models" in (
        "\n".join(after_lines)
    )
    async_key = before.contention_key.removesuffix("-sft")
    assert contention.recall(async_key) is None  # an async run's figure is another


def test_each_kind_of_run_keeps_its_own_figure():
    keys = {kind: contention.key(FINGERPRINT, 134_515_008, kind) for kind in contention.KINDS}
    assert keys == {
        "async": f"{FINGERPRINT}-p8",
        "sft": f"{FINGERPRINT}-p8-sft",
        "sync": f"{FINGERPRINT}-p8-sync",
    }
    assert all(contention.KEY.fullmatch(k) for k in keys.values())
    assert not contention.KEY.fullmatch(f"{FINGERPRINT}-p8-other")
    assert [contention.kind_of(True, 1), contention.kind_of(False, 0)] == ["sft", "sync"]
    assert contention.kind_of(False, 2) == "async"
