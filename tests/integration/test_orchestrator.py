"""The orchestrator against a real `inference` server (CPU, tiny model), with a stand-in
trainer that only publishes weight folders: batches on disk decode to the prompts and
completions, carry the server's logprobs, mask exactly the model's tokens (multi-turn too),
have zero-sum group advantages; resume repeats an uninterrupted run's example order; a
missing weight folder and an unreachable server end with a message inside their timeout."""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from rlcore.contracts.protocol import read_batch
from rlcore.files.disk_full import DISK_FULL_EXIT_CODE
from rlcore.runs.admin_token import ADMIN_TOKEN_ENV
from rlcore.runs.ownership import remove_run_files
from rlcore.runs.rundir import RunDir, steps_in
from tests.integration.helpers import SHARED_SERVER_TOKEN
from tests.integration.helpers import small_disk as mounted_disk

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
STEP_LINE = (
    r"^orchestrator: Step \d+ \| Time: [\d.]+s \| Reward: [\d.]+ \| "
    r"Throughput: [\d.]+ tokens/s \| Seq\. Length: [\d.]+ tokens/sample$"
)
ENV_TEXT = ("Higher.", "Lower.", "not a number", "Correct!")
# The runs here are not the server's run folder: they share its admin token this way.
SERVER_ENV = {**os.environ, ADMIN_TOKEN_ENV: SHARED_SERVER_TOKEN}


@pytest.fixture(scope="module")
def served(shared_server, tiny_model_dir):
    """(model dir, runs root, base url) of the session's shared `inference` server on the tiny
    model (tests/integration/conftest.py); its run folder is `<runs root>/server`."""
    yield tiny_model_dir, shared_server.run.parent, shared_server.url + "/v1"


def fresh_run(served) -> Path:
    """The server's run folder, emptied of an earlier test's run: policies load only from the
    server's own run (its weights/), so every orchestrator run that swaps weights uses it. The
    server's admin_token file is put back (test_inference_server.py reads it)."""
    run = served[1] / "server"
    token = (run / "admin_token").read_text()
    remove_run_files(run, keep_marker=True)
    (run / "admin_token").write_text(token)
    (run / "admin_token").chmod(0o600)
    return run


class StandInTrainer(threading.Thread):
    """Publishes `weights/step_<n+1>` (a copy of the model + STABLE) once batch n exists, and
    marks the trainer's checkpoint parts DONE, like a trainer that learns nothing."""

    def __init__(self, run_dir: RunDir, model: Path):
        super().__init__(daemon=True)
        run_dir.claim()  # like a trainer, before it writes into the run folder
        self.run_dir, self.model, self.stop = run_dir, model, threading.Event()

    def publish(self, step: int) -> None:
        if self.run_dir.checkpoint_complete(step):
            return
        if not self.run_dir.weights_stable(step):
            shutil.copytree(self.model, self.run_dir.weight_dir(step), dirs_exist_ok=True)
            self.run_dir.mark_weights_stable(step)
        part = self.run_dir.checkpoint_dir(step) / "trainer"
        part.mkdir(parents=True, exist_ok=True)
        (part / "DONE").write_text("")
        self.run_dir.write_manifest_if_complete(step, ["trainer", "orchestrator"])

    def sweep(self) -> None:
        for step in steps_in(self.run_dir.rollouts):
            self.publish(step + 1)
        for step in steps_in(self.run_dir.checkpoints):
            self.run_dir.write_manifest_if_complete(step, ["trainer", "orchestrator"])

    def run(self) -> None:
        self.publish(0)
        while not self.stop.wait(0.1):
            self.sweep()
        self.sweep()  # the last batch may have appeared just before the orchestrator ended


def env_toml(out: Path, *entries: str, extra: str = "") -> str:
    """A config file with one [[env]] table per entry (`id = "...", weight = ...`)."""
    path = out.parent / f"{out.name}.toml"
    tables = "".join(f"[[env]]\n{entry.replace(', ', chr(10))}\n" for entry in entries)
    path.write_text(tables + extra)
    return str(path)


def orchestrator(out: Path, model: Path, base_url: str, *flags: str, timeout: float = 300):
    cmd = [
        sys.executable,
        "-m",
        "orchestrator.main",
        "--model.name",
        str(model),
        "--client.base-url",
        base_url,
        "--output-dir",
        str(out),
        "--seq-len",
        "512",
        "--sampling.max-tokens",
        "12",
        "--client.health-timeout-s",
        "60",
        *flags,
    ]
    return subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=SERVER_ENV
    )


def run_with_trainer(out: Path, model: Path, base_url: str, *flags: str):
    run_dir = RunDir(out)
    trainer = StandInTrainer(run_dir, model)
    trainer.start()
    try:
        done = orchestrator(out, model, base_url, *flags)
    finally:
        trainer.stop.set()
        trainer.join()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def rescore(base_url: str, model: Path, ids: list[int]) -> list[float]:
    """The server's logprob of every token of `ids` given the tokens before it."""
    answer = httpx.post(
        base_url + "/completions",
        json={"model": str(model), "prompt": ids, "max_tokens": 1, "prompt_logprobs": 0},
        timeout=60,
    )
    answer.raise_for_status()
    entries = answer.json()["choices"][0]["prompt_logprobs"]
    return [next(iter(e.values()))["logprob"] if e else 0.0 for e in entries]


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_batches_on_disk(served, tmp_path):
    from transformers import AutoTokenizer

    model, root, base_url = served
    out = fresh_run(served)
    evals = '[eval]\ninterval = 2\n[[eval.env]]\nid = "rl-guess-number"\nnum_examples = 2\n'
    envs = env_toml(
        out, 'id = "rl-add-digits"', 'id = "rl-guess-number", weight = 2.0', extra=evals
    )
    done = run_with_trainer(
        out,
        model,
        base_url,
        "--max-steps",
        "3",
        "--async-level",
        "1",
        "--batch-size",
        "8",
        "--rollouts-per-example",
        "4",
        "@",
        envs,
        "--num-saved-samples",
        "8",
    )
    lines = re.findall(STEP_LINE, done.stdout, re.M)
    assert len(lines) == 3, done.stdout
    tokenizer = AutoTokenizer.from_pretrained(model)
    run_dir = RunDir(out)
    steps = [m for m in metrics(out) if "reward" in m]
    assert [m["step"] for m in steps] == [0, 1, 2]
    assert steps[2]["policy_step"] >= 1  # step 2 needed weights/step_1 or newer
    evals = [m for m in metrics(out) if "eval/rl-guess-number/reward" in m]
    assert [m["step"] for m in evals] == [0, 2, 3]  # base model, every 2 steps, the end
    assert [m["eval/policy_step"] for m in evals] == [0, 2, 3]  # each on its own policy
    eval_line = r"^orchestrator: Eval rl-guess-number at step \d+ \| Reward: "
    assert len(re.findall(eval_line, done.stdout, re.M)) == 3
    num_env_tokens = 0
    for step in range(3):
        batch = read_batch(run_dir.rollout_dir(step))
        records = [
            json.loads(line)
            for line in (run_dir.rollout_dir(step) / "samples.jsonl").read_text().splitlines()
        ]
        assert batch.step == step and len(records) == 8
        if steps[step]["num_split_rollouts"] == 0:
            check_groups(batch, records, tokenizer)
        for sample in batch.samples:
            num_env_tokens += check_sample(sample, tokenizer, base_url, model)
    assert num_env_tokens > 0  # the multi-turn env put environment tokens in completions
    assert (run_dir.checkpoint_dir(3) / "orchestrator" / "DONE").exists()
    assert run_dir.checkpoint_complete(3)


def check_groups(batch, records, tokenizer) -> None:
    """One sample per rollout: ids decode to the saved prompt and completion; each group of
    4 has advantages summing to zero."""
    assert len(batch.samples) == len(records)
    for sample, record in zip(batch.samples, records, strict=True):
        prompt = tokenizer.apply_chat_template(
            record["prompt"], add_generation_prompt=True, return_dict=True
        )
        assert sample.prompt_ids == list(prompt["input_ids"])
        assert sample.reward == pytest.approx(record["reward"])
        first = record["completion"][0]["content"]
        model_ids = tokens_where(sample, 1)
        assert tokenizer.decode(model_ids).startswith(first.rstrip())
    for start in range(0, len(batch.samples), 4):
        group = batch.samples[start : start + 4]
        assert sum(s.advantage for s in group) == pytest.approx(0.0, abs=1e-5)


def tokens_where(sample, mask: int) -> list[int]:
    pairs = zip(sample.completion_ids, sample.completion_mask, strict=True)
    return [token for token, m in pairs if m == mask]


def check_sample(sample, tokenizer, base_url, model) -> int:
    """Logprobs match a re-score by the server where mask = 1; mask-0 tokens are environment
    text; returns the number of mask-0 tokens."""
    ids = sample.prompt_ids + sample.completion_ids
    scored = rescore(base_url, model, ids)[len(sample.prompt_ids) :]
    triples = zip(sample.completion_mask, sample.completion_logprobs, scored, strict=True)
    for mask, ours, theirs in triples:
        if mask:
            assert ours == pytest.approx(theirs, abs=2e-3)
        else:
            assert ours == 0.0
    env_ids = tokens_where(sample, 0)
    if env_ids:
        env_text = tokenizer.decode(env_ids)
        assert "<|im_start|>user" in env_text and any(t in env_text for t in ENV_TEXT)
    assert set(sample.completion_mask) <= {0, 1} and sample.completion_mask[-1] == 1
    return len(env_ids)


def prompts_by_step(out: Path) -> dict[int, list]:
    run_dir = RunDir(out)
    found = {}
    for step in sorted(int(p.name.split("_")[1]) for p in run_dir.rollouts.glob("step_*")):
        lines = (run_dir.rollout_dir(step) / "samples.jsonl").read_text().splitlines()
        found[step] = [json.loads(line)["prompt"] for line in lines]
    return found


@pytest.mark.slow
def test_resume_repeats_the_uninterrupted_example_order(served, tmp_path):
    model, root, base_url = served
    envs = env_toml(root / "resume", 'id = "rl-add-digits"', 'id = "rl-repeat-word"')
    common = (
        "--batch-size",
        "4",
        "--rollouts-per-example",
        "2",
        "--num-saved-samples",
        "4",
        "--ckpt.interval",
        "2",
        "@",
        envs,
    )
    whole = fresh_run(served)
    run_with_trainer(whole, model, base_url, "--max-steps", "4", *common)
    uninterrupted = prompts_by_step(whole)
    common += ("--wandb.project", "orch-test", "--wandb.offline")  # W&B continues its run too
    parts = fresh_run(served)
    run_with_trainer(parts, model, base_url, "--max-steps", "2", *common)
    assert RunDir(parts).latest_checkpoint() == 2
    first = prompts_by_step(parts)
    shutil.rmtree(RunDir(parts).rollout_dir(1))  # as if the trainer consumed it
    done = run_with_trainer(
        parts, model, base_url, "--max-steps", "4", "--ckpt.resume-step", "-1", *common
    )
    assert "Step 0 " not in done.stdout and "Step 2 " in done.stdout
    resumed = {**first, **prompts_by_step(parts)}
    assert resumed == uninterrupted
    assert len({json.dumps(p) for p in resumed.values()}) == 4  # the steps differ
    assert RunDir(parts).latest_checkpoint() == 4
    run_ids = {
        json.loads((parts / f"checkpoints/step_{s}/orchestrator/state.json").read_text())[
            "wandb_run_id"
        ]
        for s in (2, 4)
    }
    assert len(run_ids) == 1 and None not in run_ids
    assert len(list((parts / "wandb").glob(f"offline-run-*-{run_ids.pop()}"))) == 2


@pytest.mark.slow
def test_requests_are_capped_to_fit_seq_len(served, tmp_path):
    model, root, base_url = served
    out = root / "run_capped"
    envs = env_toml(out, 'id = "rl-add-digits"')
    run_with_trainer(
        out,
        model,
        base_url,
        "--max-steps",
        "1",
        "--batch-size",
        "4",
        "--rollouts-per-example",
        "2",
        "--seq-len",
        "64",
        "--sampling.max-tokens",
        "64",
        "@",
        envs,
    )
    [step] = [m for m in metrics(out) if "reward" in m]
    assert step["num_capped_requests"] == 4  # max_tokens = seq_len leaves no room otherwise
    batch = read_batch(RunDir(out).rollout_dir(0))
    assert all(len(s.prompt_ids) + len(s.completion_ids) <= 64 for s in batch.samples)


def test_missing_weights_end_with_a_message(served, tmp_path):
    model, _, base_url = served
    start = time.monotonic()
    done = orchestrator(
        tmp_path / "run",
        model,
        base_url,
        "--max-steps",
        "3",
        "--async-level",
        "1",
        "--batch-size",
        "2",
        "--rollouts-per-example",
        "2",
        "--weights-timeout-s",
        "2",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "weights/step_1/STABLE" in done.stderr and "weights_timeout_s" in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - start < 60


def test_unreachable_server_ends_with_a_message(tmp_path):
    start = time.monotonic()
    done = orchestrator(
        tmp_path / "run", tmp_path, "http://127.0.0.1:8299/v1", "--client.health-timeout-s", "2"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "http://127.0.0.1:8299" in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - start < 60


def test_a_seq_len_the_server_cannot_hold_is_refused(served, tmp_path):
    model, _, base_url = served  # the server's max_model_len is 1024
    done = orchestrator(tmp_path / "run", model, base_url, "--seq-len", "2048")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "max_model_len 1024 but seq_len = 2048" in done.stderr
    assert "--model.max-model-len 2048" in done.stderr and "Traceback" not in done.stderr


def test_wrong_model_name_fails_fast(served, tmp_path):
    _, _, base_url = served
    done = orchestrator(tmp_path / "run", Path("not/the-model"), base_url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not model.name 'not/the-model'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_requests_move_off_a_server_that_hangs(served, tmp_path):
    """Two servers, one of which hangs on every generation: its requests time out, move to the
    real server, and the step completes with every rollout (the hanging one is left out)."""
    from http.server import ThreadingHTTPServer

    from tests.integration.test_faults_inference import HangingGeneration

    model, root, base_url = served
    HangingGeneration.model = str(model)
    stand_in = ThreadingHTTPServer(("127.0.0.1", 0), HangingGeneration)
    stand_in.daemon_threads = True
    threading.Thread(target=stand_in.serve_forever, daemon=True).start()
    out = root / "two-servers"
    urls = json.dumps([base_url, f"http://127.0.0.1:{stand_in.server_address[1]}/v1"])
    envs = env_toml(out, 'id = "rl-add-digits"')
    try:
        done = orchestrator(
            out,
            model,
            urls,
            "--max-steps",
            "2",
            "--batch-size",
            "8",
            "--rollouts-per-example",
            "2",
            "--client.timeout-s",
            "5",
            "@",
            envs,
        )
    finally:
        stand_in.shutdown()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "its requests go to the other servers" in output, output[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["num_samples"] for r in records] == [8, 8]  # nothing lost to the hanging server
    assert sum(r["requests/server_0"] for r in records) == 16
    assert sum(r["requests/server_1"] for r in records) == 0


@pytest.mark.slow
def test_a_v1_taskset_samples_through_the_generate_route(served):
    """`type = "v1"` for training, and the same package detected behind the default type for
    eval: every rollout ran the harness, was scored by the taskset's reward, and its tokens and
    logprobs are the server's (re-scored), with the chat template's prompt."""
    from transformers import AutoTokenizer

    model, root, base_url = served
    out = fresh_run(served)
    evals = (
        '[eval]\ninterval = 2\neval_base_model = false\n[[eval.env]]\nid = "rl-add-digits-v1"\n'
        'args = { split = "eval" }\nnum_examples = 2\n'
    )
    envs = env_toml(out, 'type = "v1", id = "rl-add-digits-v1"', extra=evals)
    done = run_with_trainer(
        out,
        model,
        base_url,
        "--max-steps",
        "2",
        "--batch-size",
        "8",
        "--rollouts-per-example",
        "4",
        "@",
        envs,
        "--num-saved-samples",
        "8",
    )
    assert (
        "'rl-add-digits-v1' is a verifiers v1 taskset: loading it as type v1"
        in done.stdout + done.stderr
    )
    tokenizer = AutoTokenizer.from_pretrained(model)
    steps = [m for m in metrics(out) if "reward" in m]
    assert [m["step"] for m in steps] == [0, 1]
    assert all(m["num_errors"] == 0 and "metrics/correct_sum" in m for m in steps)
    assert [m["step"] for m in metrics(out) if "eval/rl-add-digits-v1/reward" in m] == [2]
    run_dir = RunDir(out)
    for step in range(2):
        batch = read_batch(run_dir.rollout_dir(step))
        lines = (run_dir.rollout_dir(step) / "samples.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        assert len(batch.samples) == len(records) == 8
        for sample, record in zip(batch.samples, records, strict=True):
            assert record["error"] is None and record["reward"] in (0.0, 1.0)
            assert record["metrics"]["correct_sum"] == record["reward"]
            messages = [{"role": "user", "content": record["prompt"]}]
            prompt = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_dict=True
            )
            assert sample.prompt_ids == list(prompt["input_ids"])
            check_sample(sample, tokenizer, base_url, model)
            assert set(sample.completion_mask) == {1}


@pytest.fixture
def small_disk(tmp_path):
    """A real 160 KiB file system (skipped where this user may not mount one)."""
    with mounted_disk(tmp_path / "disk", "160k") as mount:
        yield mount


@pytest.mark.slow
def test_a_full_disk_stops_the_orchestrator_cleanly(served, small_disk):
    """The orchestrator fills a real small disk: it stops with one message, and every batch,
    metrics line and checkpoint left behind is whole (no temporaries, no torn lines)."""
    model, _, base_url = served
    out = small_disk / "run"
    done = orchestrator(
        out,
        model,
        base_url,
        "--max-steps",
        "64",
        "--async-level",
        "64",
        "--batch-size",
        "8",
        "--rollouts-per-example",
        "4",
        "--ckpt.interval",
        "2",
        "--num-saved-samples",
        "8",
    )
    assert done.returncode == DISK_FULL_EXIT_CODE, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"the disk is full: writing {out}/" in done.stderr and "Traceback" not in done.stderr
    run_dir = RunDir(out)
    written = steps_in(run_dir.rollouts)
    assert written and len(written) < 64
    for step in written:
        assert read_batch(run_dir.rollout_dir(step)).step == step
    leftovers = [p for p in out.rglob(".*.tmp*")]
    assert not leftovers, leftovers
    assert metrics(out)  # every line parses
    for step in steps_in(run_dir.checkpoints):
        part = run_dir.part_dir(step, "orchestrator")
        if (part / "DONE").exists():
            json.loads((part / "state.json").read_text())
