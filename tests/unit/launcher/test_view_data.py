"""`rl view`'s readers on real files: the path checks every file goes through, metrics.jsonl read
once per change (appended lines only, torn lines skipped, resumes marked, curves downsampled),
the rollout archive (groups, filters, turns and tool calls, token columns, a torn file) and
evaluations."""

import json
import os

import pytest

from launcher.view import archive, curves, safe
from launcher.view.data import RunData
from tests.view_runs import (
    append_metrics,
    make_evals_folder,
    make_run,
    write_eval,
    write_samples,
)


@pytest.mark.parametrize(
    "text",
    ["", "..", "a/../..", "../x", "/etc/passwd", "a\x00b", "%2e%2e/x", "a%2fb", "a\\..\\b", "./.."],
)
def test_a_request_path_that_is_not_plain_is_refused(text):
    with pytest.raises(safe.Refused):
        safe.check_relative(text)


def test_plain_relative_paths_pass():
    assert safe.check_relative("runs/a/./b/") == ["runs", "a", "b"]


def test_a_link_out_of_the_root_is_refused_and_one_inside_is_followed(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "secret.txt"
    root.mkdir()
    outside.write_text("secret")
    (root / "inner.txt").write_text("inner")
    (root / "out").symlink_to(outside)
    (root / "in").symlink_to(root / "inner.txt")
    (root / "up").symlink_to(tmp_path)
    with pytest.raises(safe.Refused):
        safe.inside(root, "out")
    with pytest.raises(safe.Refused):
        safe.inside(root, "up", "secret.txt")
    assert safe.inside(root, "in").read_text() == "inner"
    with pytest.raises(safe.Missing):
        safe.inside(root, "nothere")


def test_metrics_are_read_once_per_change_then_only_what_was_appended(tmp_path):
    run = make_run(tmp_path / "r", steps=3)
    data = RunData(run, tmp_path)
    first = data.curves()
    assert sorted(first.series["orchestrator", "reward"]) == [0, 1, 2]
    offset = first.offset
    assert data.curves() is first and first.offset == offset  # unchanged: nothing re-read
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"component": "orchestrator", "step": 3, "rew')  # a line still being written
    assert sorted(data.curves().series["orchestrator", "reward"]) == [0, 1, 2]
    with (run / "metrics.jsonl").open("a") as f:
        f.write('ard": 0.5}\n')
    grown = data.curves()
    assert grown.offset > offset and grown.series["orchestrator", "reward"][3] == 0.5


def test_a_torn_line_in_the_middle_is_skipped(tmp_path):
    run = make_run(tmp_path / "r", steps=2)
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"component": "trainer", "step": 9, "lo\n{not json}\n[1, 2]\n')
    append_metrics(run, [5])
    found = RunData(run, tmp_path).curves()
    assert sorted(found.series["orchestrator", "reward"]) == [0, 1, 5]
    assert 9 not in found.series["trainer", "loss"]


def test_a_replaced_metrics_file_is_read_again_from_its_start(tmp_path):
    run = make_run(tmp_path / "r", steps=4)
    data = RunData(run, tmp_path)
    assert len(data.curves().series["orchestrator", "reward"]) == 4
    replacement = run / "metrics.new"
    replacement.write_text(curves_text(steps=2))
    os.replace(replacement, run / "metrics.jsonl")
    assert sorted(data.curves().series["orchestrator", "reward"]) == [0, 1]


def curves_text(steps: int) -> str:
    from tests.view_runs import metrics_lines

    return metrics_lines(range(steps))


def test_a_step_that_comes_again_marks_a_resume_and_the_last_record_wins(tmp_path):
    run = make_run(tmp_path / "r", steps=5)
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"component": "trainer", "step": 3, "loss": 42.0}) + "\n")
    found = RunData(run, tmp_path).curves()
    assert [m["step"] for m in found.markers] == [3]
    assert found.series["trainer", "loss"][3] == 42.0


def test_long_curves_are_downsampled_to_the_limit_keeping_the_last_point():
    steps = list(range(10_000))
    xs, ys = curves.downsample(steps, [float(s) for s in steps], 600)
    assert len(xs) <= 600 and xs[-1] == 9999 and ys[-1] == 9999.0
    assert xs == sorted(xs)


def test_the_panels_use_the_names_the_processes_write(tmp_path):
    run = make_run(tmp_path / "r", steps=3)
    (run / "evals").mkdir()
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"component": "evals", "step": 2, "rl-add-digits/reward": 0.7}) + "\n")
    panels = {p["title"]: p for p in curves.panels(RunData(run, tmp_path).curves())}
    names = {title: [t["name"] for t in p["traces"]] for title, p in panels.items()}
    assert names["reward"] == ["training", "eval rl-add-digits"]
    assert names["step time"] == [
        "generate",
        "orchestrator wait (weights)",
        "trainer wait (batch)",
        "train",
        "publish",
    ]
    for title in ("loss", "entropy", "mismatch_kl", "grad norm", "tokens/s", "memory"):
        assert panels[title]["traces"], title
    assert panels["memory"]["traces"][0]["y"][0] == pytest.approx(900 / 1024)


def test_a_page_of_groups_shows_every_member_turns_tool_calls_and_tokens(tmp_path):
    run = make_run(tmp_path / "r")
    write_samples(run, [0, 1], groups=3, envs=("a", "b"))
    data = RunData(run, tmp_path)
    assert archive.sample_steps(data) == [0, 1]
    assert archive.groups_page(data, 1)["groups"][0]["members"][0]["tokens"] == []  # not read
    page = archive.groups_page(data, 1, with_tokens=True)
    assert page["num_groups"] == 6 and page["envs"] == ["a", "b"] and page["num_rows"] == 48
    group = page["groups"][0]
    assert [m["member"] for m in group["members"]] == list(range(8))
    tool_member = group["members"][2]
    assert [t["role"] for t in tool_member["turns"]] == ["assistant", "tool", "assistant"]
    assert tool_member["turns"][0]["tool_calls"][0]["name"] == "add"
    assert group["members"][1]["truncated"] and group["members"][7]["error"]
    assert len(group["members"][0]["tokens"]) == 12
    first = group["members"][0]["tokens"]
    assert first[4]["policy"] is False and first[4]["shade"] is None  # the mask is read
    assert 0 <= first[0]["shade"] <= 1 and first[0]["shade"] == archive.shade(first[0]["lp"])
    only_b = archive.groups_page(data, 1, env="b")
    assert {g["env"] for g in only_b["groups"]} == {"b"} and only_b["num_groups"] == 3
    assert archive.groups_page(data, 1, low=1.5)["num_groups"] == 0
    assert archive.groups_page(data, 1, high=0.9)["num_groups"] == 6


def test_groups_are_paged(tmp_path):
    run = make_run(tmp_path / "r")
    write_samples(run, [0], groups=20)
    data = RunData(run, tmp_path)
    first, last = archive.groups_page(data, 0), archive.groups_page(data, 0, page=99)
    assert len(first["groups"]) == archive.GROUPS_PER_PAGE and first["num_pages"] == 3
    assert last["page"] == 2 and [g["group"] for g in last["groups"]] == [16, 17, 18, 19]


def test_a_torn_archive_is_unreadable_not_a_traceback(tmp_path):
    run = make_run(tmp_path / "r")
    write_samples(run, [0])
    path = run / "samples" / "step_0.parquet"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(archive.Unreadable, match="step_0.parquet"):
        archive.groups_page(RunData(run, tmp_path), 0)


def test_evaluations_of_a_run_and_of_an_evals_folder(tmp_path):
    run = make_run(tmp_path / "r")
    write_eval(run / "evals", 4, envs=("a", "b"))
    data = RunData(run, tmp_path)
    assert data.eval_steps() == [4]
    table = archive.eval_table(data)
    assert [(r["step"], r["env"]) for r in table] == [(4, "a"), (4, "b")]
    assert dict(table[0]["passes"])[4] == 1.0
    samples = archive.eval_samples(data, 4, env="b", failed=True)
    assert samples["num_rows"] == 6 and all(s["reward"] == 0 for s in samples["samples"])
    evals = RunData(make_evals_folder(tmp_path / "ev"), tmp_path)
    assert evals.kind() == "eval" and evals.eval_steps() == [archive.SINGLE, 0]
    assert archive.eval_table(evals)[0]["env"] == "rl-add-digits"
    (run / "evals" / "step_4" / "summary.json").write_text("{torn")
    assert "summary.json: not JSON" in archive.eval_table(data)[0]["error"]


def test_status_of_a_copied_live_run_is_not_running_here(tmp_path):
    copied = RunData(make_run(tmp_path / "c", status="running"), tmp_path)
    status, why = copied.status()
    assert status == "not running here" and "elsewhere" in why
    live = RunData(make_run(tmp_path / "l", live=True), tmp_path)
    assert live.status() == ("running", "")  # this process stands in for its launcher
    failed = RunData(make_run(tmp_path / "f", status="failed"), tmp_path)
    assert failed.status() == ("failed", "trainer failed (exit code 1)")


def test_a_live_run_shows_the_inference_port_run_json_records(tmp_path):
    """rl chooses the port (8000 only when free): the view reads it from run.json, and says
    nothing of a server once the run has ended or where the launcher is not proved."""
    urls = ["http://127.0.0.1:8003", "http://127.0.0.1:8004"]
    for root, live in ((tmp_path / "l", True), (tmp_path / "c", False)):
        make_run(root, live=live, status="running")
        state = json.loads((root / "run.json").read_text())
        (root / "run.json").write_text(json.dumps({**state, "inference_urls": urls}))
    assert RunData(tmp_path / "l", tmp_path).summary()["serving"] == urls
    assert RunData(tmp_path / "c", tmp_path).summary()["serving"] == []  # not running here


def test_the_runs_time_left_and_its_estimate_against_actual(tmp_path):
    """As `rl status` says it: a live run's time left from its estimate and measured steps; a
    finished run's estimate against what it took; forged figures say nothing, never an
    error."""
    import time

    live = make_run(tmp_path / "l", live=True, steps=0)
    state = json.loads((live / "run.json").read_text())
    estimate = {"step_s": 10.0, "end_s": 5.0, "wall_s": 105.0}
    progress = {"max_steps": 10}
    (live / "run.json").write_text(
        json.dumps({**state, "estimate": estimate, "progress": progress})
    )
    now = time.time()
    with (live / "metrics.jsonl").open("w") as f:
        for step in (1, 2, 3, 4):  # a step every 10 s, the last just now: 6 left
            record = {"component": "trainer", "step": step, "time": now - 10 * (4 - step)}
            f.write(json.dumps(record) + "\n")
    words = RunData(live, tmp_path).summary()["time"]
    assert words.startswith("~1 min") and "expected to finish at" in words, words
    done = make_run(tmp_path / "f", status="finished")
    state = json.loads((done / "run.json").read_text())
    measured = {
        "estimate": {"wall_s": 100.0},
        "measured": {"wall_s": 125.0},
        "estimate_accuracy": {"wall": 1.25, "trainer_peak": 0.97},
    }
    (done / "run.json").write_text(json.dumps({**state, **measured}))
    words = RunData(done, tmp_path).summary()["time"]
    assert words == "estimated 1 min 40 s, took 2 min 05 s (1.25x); trainer_peak 0.97x", words
    live_state = json.loads((live / "run.json").read_text())
    forged = {"estimate": {"step_s": 1e300}, "progress": {"max_steps": 10**18}}
    (live / "run.json").write_text(json.dumps({**live_state, **forged}))
    assert isinstance(RunData(live, tmp_path).summary()["time"], str)


def test_a_run_from_an_older_version_lacking_files_still_reads(tmp_path):
    root = tmp_path / "old"
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "trainer.toml").write_text("max_steps = 3\n")
    data = RunData(root, tmp_path)
    summary = data.summary()
    assert summary["status"] == "no run.json" and summary["step"] is None
    assert data.checkpoints() == [] and data.log_tails() == [] and data.waits() == []
    assert archive.sample_steps(data) == [] and data.eval_steps() == []


def test_a_nan_or_a_field_of_another_type_costs_only_its_block_the_slow_path(tmp_path, monkeypatch):
    run = make_run(tmp_path / "r", steps=40)
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"component": "trainer", "step": 41, "loss": NaN, "entropy": 1.5}\n')
        f.write('{"component": "trainer", "step": 42, "loss": "high", "entropy": 1.25}\n')
    append_metrics(run, range(43, 45))
    monkeypatch.setattr(curves, "BLOCK_BYTES", 2000)  # several blocks, one of them bad
    found = curves.refresh(curves.Curves(), run / "metrics.jsonl")
    loss, entropy = found.series["trainer", "loss"], found.series["trainer", "entropy"]
    assert 41 not in loss and 42 not in loss and entropy[41] == 1.5 and entropy[42] == 1.25
    assert sorted(found.series["orchestrator", "reward"]) == [*range(40), 43, 44]


def test_a_long_file_is_read_in_runs_of_lines_every_component_in_each(tmp_path, monkeypatch):
    run = make_run(tmp_path / "r", steps=1500, ckpt_every=10_000)
    with (run / "metrics.jsonl").open("a") as f:  # in the middle: not in the tail read whole
        f.write(json.dumps({"component": "evals", "step": 10, "rl-add-digits/reward": 0.4}) + "\n")
    append_metrics(run, range(1500, 3001))
    monkeypatch.setattr(curves, "SAMPLE_ABOVE", 1000)
    monkeypatch.setattr(curves, "SAMPLED_LINES", 800)
    found = curves.refresh(curves.Curves(), run / "metrics.jsonl")
    assert 6.5 <= found.sampled <= 8
    rewards, losses = found.series["orchestrator", "reward"], found.series["trainer", "loss"]
    assert 80 < len(rewards) < 1000 and 80 < len(losses) < 1000  # both components sampled
    assert sum(1000 < s < 2000 for s in rewards) > 20  # spread over the whole run
    assert min(rewards) == 0 and all(s in rewards for s in range(2801, 3001))  # the tail whole
    assert found.series["evals", "rl-add-digits/reward"] == {10: 0.4}
    assert found.last_step == {"orchestrator": 3000, "trainer": 3001, "evals": 10}


def test_the_runs_list_reads_only_the_ends_of_a_long_metrics_file(tmp_path):
    run = make_run(tmp_path / "r", steps=3000, ckpt_every=10_000)
    brief = curves.ends(run / "metrics.jsonl", tail_bytes=20_000)
    full = curves.refresh(curves.Curves(), run / "metrics.jsonl")
    assert brief.last_step == full.last_step and brief.first_time == full.first_time
    assert brief.last_time == full.last_time and len(brief.series["trainer", "loss"]) < 100
    assert curves.last_mean(brief, "orchestrator", "reward") == pytest.approx(
        curves.last_mean(full, "orchestrator", "reward")
    )
    data = RunData(run, tmp_path)
    summary = data.summary(brief=True)
    assert summary["step"] == 3000 and summary["wall_s"] == pytest.approx(4 * 2999 + 2)
    assert data.curves_cache.key == ()  # the whole file was not read


def test_restarts_are_counted_from_the_attempt_headers(tmp_path):
    run = make_run(tmp_path / "r")
    data = RunData(run, tmp_path)
    assert data.restarts() == 0
    with (run / "logs" / "trainer.log").open("a") as f:
        f.write("===== attempt 2026-11-27 10:05:00 : python -m trainer.main\ntrainer: again\n")
    assert data.restarts() == 1


def test_an_unmarked_evals_folder_is_found_as_a_run_of_kind_eval(tmp_path):
    from launcher.view.library import Library

    old = make_evals_folder(tmp_path / "outputs" / "old-evals")
    (old / ".rl-run").unlink()  # written by a version before evals marked its folder
    make_run(tmp_path / "outputs" / "train")
    found = {run.name: run for run in Library([tmp_path / "outputs"]).scan().values()}
    assert sorted(found) == ["old-evals", "train"] and found["old-evals"].kind() == "eval"
    assert found["old-evals"].status()[0] == "finished"


def test_a_resumed_run_is_compared_with_the_config_its_checkpoint_kept(tmp_path):
    """Each part's checkpoint keeps the config it ran with (RunDir.keep_config); a run resumed
    from that step shows what changed against it, read from the files (not from the code)."""
    from launcher.view.compare import resume_note
    from rlcore.runs.rundir import RunDir

    root = make_run(tmp_path / "run", steps=4)
    for part in ("trainer", "orchestrator"):
        RunDir(root).mark_part_done(4, part)
    kept = root / "checkpoints" / "step_4" / "configs" / "trainer.toml"
    assert kept.read_text() == (root / "configs" / "trainer.toml").read_text()
    trainer = (root / "configs" / "trainer.toml").read_text()
    (root / "configs" / "trainer.toml").write_text(
        trainer.replace("lr = 3e-05", "lr = 1e-05").replace(
            'resume_step = "None"', "resume_step = 4"
        )
    )
    note = resume_note(RunData(root, tmp_path))
    assert note["resumed"] and note["recorded"] and note["step"] == 4, note
    changed = {row["key"]: row["values"] for row in note["diff"]}
    assert changed["trainer.optim.lr"] == ["3e-05", "1e-05"], changed
