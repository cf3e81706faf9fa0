"""The real `rl` launcher on CPU with a tiny model: crash, resume, and clean shutdown."""

import contextlib
import json
import os
import re
import signal
import time
import tomllib
from pathlib import Path

import psutil
import pytest

from launcher.exits import oom_kills
from rlcore import faults
from rlcore.host.machine import AVX2_ENV, probe
from rlcore.runs.rundir import RunDir
from tests.integration.helpers import (
    REPO,
    assert_archive_holds_every_step,
    assert_finished_every_step,
    avx2_said,
    free_port,
    kill_sessions,
    run_state,
    session_members,
    start_rl,
    tiny_rl_toml,
    wait_for,
)

pytestmark = pytest.mark.integration


def run_sessions(out: Path, rl_pid: int) -> set[int]:
    return {rl_pid, *run_state(out).get("pids", {}).values()}


TRANSPORTS = ("collective", "filesystem")


def cases(all_cases: list[tuple], in_default_run: set) -> list:
    """Test parameters: the cases outside `in_default_run` are slow."""
    return [
        pytest.param(
            *case, id="-".join(case), marks=() if case in in_default_run else (pytest.mark.slow,)
        )
        for case in all_cases
    ]


# All slow: the default run's restart after a kill (the trainer's, on the collective transport,
# by --max-restarts) is test_determinism.py's, which also compares the numbers with an
# uninterrupted run; test_faults.py's default case resumes a LoRA run by hand on the
# filesystem one; test_sigterm_to_rl_leaves_no_process trains the quick start's own files.
RESUME_CASES = cases([(t,) for t in TRANSPORTS], set())
RESTART_CASES = cases([(t, c) for t in TRANSPORTS for c in ("trainer", "inference")], set())


QUICKSTART = REPO / "configs" / "quickstart"


def job(
    tmp_path: Path, model: Path, transport: str, max_steps: int = 4
) -> tuple[Path, Path, tuple[str, ...]]:
    """(config, run folder, flags) of a `max_steps` job: on the collective transport the quick
    start's own three files with the tiny model, as a user runs them; on the filesystem one
    the tiny job's rl.toml."""
    out, config = tmp_path / "run", tmp_path / "rl.toml"
    if transport == "filesystem":
        config.write_text(tiny_rl_toml(model, out, free_port(), max_steps=max_steps))
        return config, out, ("--weight-transfer.type", "filesystem")
    config.write_text(f"[inference.server]\nport = {free_port()}\n")
    files = {"trainer": "train", "orchestrator": "orch", "inference": "infer"}
    layered = [
        part for c, f in files.items() for part in (f"--{c}", "@", str(QUICKSTART / f"{f}.toml"))
    ]
    flags = (
        "--model.name",
        str(model),
        "--max-steps",
        str(max_steps),
        "--output-dir",
        str(out),
        "--ckpt.interval",
        "1",
    )
    return config, out, (*layered, *flags)


@pytest.mark.parametrize(("transport",), RESUME_CASES)
def test_trainer_killed_then_resume_finishes(tiny_model_dir, tmp_path, transport):
    config, out, transport_flags = job(tmp_path, tiny_model_dir, transport)
    rl = start_rl(config, *transport_flags, log=tmp_path / "rl1.log")
    run = RunDir(out)
    try:
        wait_for(
            lambda: run.latest_checkpoint() is not None,
            600,
            "the first checkpoint",
            proc=rl,
            log=tmp_path / "rl1.log",
        )
        sessions = run_sessions(out, rl.pid)
        os.kill(run_state(out)["pids"]["trainer"], signal.SIGKILL)
        code = rl.wait(timeout=120)
        log = (tmp_path / "rl1.log").read_text()
        assert code != 0, log
        assert "rl: error: trainer was killed (SIGKILL)" in log, log
        wait_for(lambda: not session_members(sessions), 30, "all run processes to exit")
    finally:
        kill_sessions(run_sessions(out, rl.pid))
    first = run.latest_checkpoint()
    assert first is not None and first < 4

    flags = ("--ckpt.resume-step", "-1", *transport_flags)
    rl = start_rl(config, *flags, log=tmp_path / "rl2.log")
    try:
        code = rl.wait(timeout=900)
        log = (tmp_path / "rl2.log").read_text()
        assert code == 0, log
        assert f"resuming from step {first}" in log
    finally:
        kill_sessions(run_sessions(out, rl.pid))
    assert_finished_every_step(run, transport)
    assert not session_members(run_sessions(out, rl.pid))


MACHINES = {
    "this-cpu": {},
    # An AVX2-only CPU (no bf16 kernels), where the quick start's first start once died in
    # vLLM's engine: rlcore.host.machine.AVX2_ENV caps oneDNN, ATen and MKL to AVX2 on any x86 CPU.
    "avx2": AVX2_ENV,
}


def engine_kernels(inference_pid: int) -> set[str]:
    """Which of vLLM's CPU kernel libraries inference and its engine core have loaded."""
    processes = [psutil.Process(inference_pid)]
    processes += processes[0].children(recursive=True)
    paths = {m.path for p in processes for m in p.memory_maps()}
    return {re.sub(r"\.(abi3\.)?so$", "", Path(path).name) for path in paths if "/vllm/_C" in path}


@pytest.mark.parametrize(
    "machine",
    [
        pytest.param(
            m,
            marks=pytest.mark.skipif(
                m == "avx2" and probe().arch != "x86_64", reason="the ISA caps are x86's"
            ),
        )
        for m in MACHINES
    ],
)
def test_sigterm_to_rl_leaves_no_process(tiny_model_dir, tmp_path, machine):
    """The quick start's own three files with the tiny model, as a user runs them, train a
    step, on this CPU and on an AVX2 one (fp32 everywhere, vLLM's AVX2 kernels); SIGTERM to rl
    then stops every process of the run, and rl exits 143."""
    config, out, flags = job(tmp_path, tiny_model_dir, "collective", max_steps=50)
    log = tmp_path / "rl.log"
    rl = start_rl(config, *flags, log=log, env=MACHINES[machine])
    run = RunDir(out)
    try:
        trained = lambda: run.metrics.exists() and '"trainer"' in run.metrics.read_text()  # noqa: E731
        wait_for(trained, 600, "the first trainer step", proc=rl, log=log)
        sessions = run_sessions(out, rl.pid)
        assert len(run_state(out)["pids"]) == 3
        kernels = engine_kernels(run_state(out)["pids"]["inference"])
        rl.send_signal(signal.SIGTERM)
        code = rl.wait(timeout=120)
        assert code == 143, log.read_text()
        wait_for(lambda: not session_members(sessions), 30, "all run processes to exit")
        assert run_state(out)["status"] == "stopped"
    finally:
        kill_sessions(run_sessions(out, rl.pid))
    if machine == "avx2":
        text = log.read_text()
        assert avx2_said() in text, text
        assert "trainer.model.dtype = float32 (auto: no native bf16" in text, text
        assert "_C_AVX2" in kernels, kernels
    print(f"{machine}: vLLM kernels {sorted(kernels)}")


def run_until_stalled(model: Path, tmp_path: Path, hang: dict) -> tuple[int, str, Path]:
    """A 10-step run with a fault hook that hangs one component (`hang`: its env variable);
    rl's exit code, its console text and the run directory, once every process has gone."""
    out = tmp_path / "run"
    config = tmp_path / "rl.toml"
    config.write_text(tiny_rl_toml(model, out, free_port(), max_steps=10))
    log = tmp_path / "rl.log"
    rl = start_rl(config, "--stall-timeout-s", "60", log=log, env=hang)
    try:
        code = rl.wait(timeout=600)
        sessions = run_sessions(out, rl.pid)
        wait_for(lambda: not session_members(sessions), 30, "all run processes to exit")
    finally:
        kill_sessions(run_sessions(out, rl.pid))
    return code, log.read_text(), out


@pytest.mark.slow
def test_a_hanging_trainer_is_dumped_and_the_run_stopped(tiny_model_dir, tmp_path):
    code, text, out = run_until_stalled(tiny_model_dir, tmp_path, {faults.TRAINER_HANG_ENV: "2"})
    assert code == 1, text
    assert "trainer has not made progress" in text and "in hang_at_step" in text, text
    trainer_log = (out / "logs" / "trainer.log").read_text()
    assert "Current thread" in trainer_log and "trainer/train.py" in trainer_log


def first_trainer_step(out: Path) -> bool:
    metrics = out / "metrics.jsonl"
    return metrics.exists() and '"component": "trainer"' in metrics.read_text()


@pytest.mark.slow
def test_a_frozen_trainer_is_named_within_minutes_with_the_defaults(tiny_model_dir, tmp_path):
    """SIGSTOP: the process cannot dump or log anything itself; rl names it from its state."""
    out = tmp_path / "run"
    config = tmp_path / "rl.toml"
    config.write_text(tiny_rl_toml(tiny_model_dir, out, free_port(), max_steps=200))
    log = tmp_path / "rl.log"
    rl = start_rl(config, log=log)
    try:
        wait_for(lambda: first_trainer_step(out), 600, "a trainer step", proc=rl, log=log)
        sessions = run_sessions(out, rl.pid)
        os.kill(run_state(out)["pids"]["trainer"], signal.SIGSTOP)
        frozen_at = time.monotonic()
        code = rl.wait(timeout=300)
        named_after_s = time.monotonic() - frozen_at
        wait_for(lambda: not session_members(sessions), 30, "all run processes to exit")
    finally:
        kill_sessions(run_sessions(out, rl.pid))
    text = log.read_text()
    print(f"a frozen trainer was named after {named_after_s:.0f} s")
    assert code == 1, text
    assert "rl: error: trainer is stopped (SIGSTOP" in text, text
    assert run_state(out)["failed_component"] == "trainer"


@pytest.mark.slow
def test_a_trainer_slowed_but_moving_is_not_stopped(tiny_model_dir, tmp_path):
    """The trainer is stopped three quarters of the time (as on a machine many times too
    busy): every step takes four times as long, and the run still finishes."""
    out = tmp_path / "run"
    config = tmp_path / "rl.toml"
    config.write_text(tiny_rl_toml(tiny_model_dir, out, free_port(), max_steps=6))
    log = tmp_path / "rl.log"
    rl = start_rl(config, log=log)
    try:
        wait_for(
            lambda: "trainer" in run_state(out).get("pids", {}),
            120,
            "the trainer",
            proc=rl,
            log=log,
        )
        trainer = run_state(out)["pids"]["trainer"]
        with contextlib.suppress(ProcessLookupError):
            while rl.poll() is None:
                os.killpg(trainer, signal.SIGSTOP)
                time.sleep(1.5)
                os.killpg(trainer, signal.SIGCONT)
                time.sleep(0.5)
        code = rl.wait(timeout=600)
    finally:
        kill_sessions(run_sessions(out, rl.pid))
    assert code == 0, log.read_text()


@pytest.mark.slow
def test_a_hanging_inference_server_is_named_and_dumped(tiny_model_dir, tmp_path):
    """The server blocks on its first weight update: the orchestrator and trainer then wait
    too, but the stop names inference, the wait it is in, and its stacks are in its log."""
    hang = {faults.INFERENCE_HANG_ENV: "1"}
    code, text, out = run_until_stalled(tiny_model_dir, tmp_path, hang)
    assert code == 1, text
    assert "inference has not answered /health" in text and "in hang_at_update" in text, text
    inference_log = (out / "logs" / "inference.log").read_text()
    assert "Current thread" in inference_log and "hang_if_asked" in inference_log


@pytest.mark.parametrize(("transport", "component"), RESTART_CASES)
def test_max_restarts_resumes_after_a_kill_and_finishes(
    tiny_model_dir, tmp_path, transport, component
):
    config, out, flags = job(tmp_path, tiny_model_dir, transport)
    log = tmp_path / "rl.log"
    rl = start_rl(config, "--max-restarts", "1", *flags, log=log)
    run = RunDir(out)
    try:
        wait_for(lambda: run.latest_checkpoint() is not None, 600, "a checkpoint", proc=rl, log=log)
        killed_after = run.latest_checkpoint()
        os.kill(run_state(out)["pids"][component], signal.SIGKILL)
        code = rl.wait(timeout=900)
        sessions = run_sessions(out, rl.pid)
        wait_for(lambda: not session_members(sessions), 30, "all run processes to exit")
    finally:
        kill_sessions(run_sessions(out, rl.pid))
    text = log.read_text()
    assert code == 0, text
    # The run may have checkpointed again between the read and the kill (tiny steps are fast).
    resumed = re.search(r"resuming from step (\d+)", text)
    assert f"rl: error: {component} was killed (SIGKILL)" in text, text
    if oom_kills() is not None:  # the test killed it, and the cgroup's OOM count says so
        assert f"{component} was killed (SIGKILL) by another process or a user" in text, text
    assert "(restart 1 of 1)" in text and resumed and int(resumed[1]) >= killed_after, text
    assert_finished_every_step(run, transport)
    assert_archive_holds_every_step(run)


@pytest.mark.slow
def test_model_folder_sampling_defaults_do_not_break_parity(tiny_model_dir, tmp_path):
    """Hub models ship generation defaults (top_k, top_p, penalties) that vLLM would apply to
    every request that leaves them out; a synchronous fp32 run must stay on-policy anyway.

    The same run holds the secrets: the W&B key (--wandb-api-key) and the server's API key
    (VLLM_API_KEY, which the server then requires) appear in no config, log or run file."""
    import shutil

    import httpx

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    defaults = {"do_sample": True, "top_k": 3, "top_p": 0.5, "repetition_penalty": 1.3}
    config_file = model / "generation_config.json"
    existing = json.loads(config_file.read_text()) if config_file.exists() else {}
    config_file.write_text(json.dumps({**existing, **defaults}))
    out = tmp_path / "run"
    config = tmp_path / "rl.toml"
    config.write_text(
        tiny_rl_toml(model, out, free_port(), max_steps=3).replace(
            "async_level = 1", "async_level = 0"
        )
    )
    log = tmp_path / "rl.log"
    secret, server_key = "sekrit-api-key-3141", "sekrit-server-key-2718"
    rl = start_rl(config, "--wandb-api-key", secret, log=log, env={"VLLM_API_KEY": server_key})
    try:
        wait_for(lambda: run_state(out).get("status") == "running", 600, "the run to start")
        models = run_state(out)["inference_url"] + "/v1/models"
        assert httpx.get(models, timeout=10).status_code == 401
        keyed = {"Authorization": f"Bearer {server_key}"}
        assert httpx.get(models, headers=keyed, timeout=10).status_code == 200
        code = rl.wait(timeout=900)
    finally:
        kill_sessions(run_sessions(out, rl.pid))
    assert code == 0, log.read_text()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    kls = [r["mismatch_kl"] for r in records if r["component"] == "trainer"]
    assert len(kls) == 3 and max(kls) <= 1e-3, kls
    # the API key reached the processes' environment only: no config, log or file holds it
    files = [log, *(f for f in out.rglob("*") if f.is_file() and f.stat().st_size < 2**20)]
    for key in (secret, server_key):
        assert not [f for f in files if key in f.read_text(errors="replace")]


@pytest.mark.slow
def test_two_inference_replicas_share_requests_and_every_weight_update(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    config = tmp_path / "rl.toml"
    # async_level 0: every batch waits for the previous step's policy, so each update is served
    # (with 1, a fast trainer may publish step 2 before batch 2 asks and step 1 is skipped)
    config.write_text(
        tiny_rl_toml(tiny_model_dir, out, free_port(), max_steps=4).replace(
            "async_level = 1", "async_level = 0"
        )
    )
    log = tmp_path / "rl.log"
    rl = start_rl(config, "--inference.replicas", "2", log=log)
    try:
        code = rl.wait(timeout=900)
    finally:
        kill_sessions(run_sessions(out, rl.pid))
    assert code == 0, log.read_text()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    served = [sum(r.get(f"requests/server_{i}", 0) for r in records) for i in (0, 1)]
    assert min(served) > 0, served  # both servers generated
    swaps = [
        [
            line.split("now serving ")[1].split()[0]
            for line in (out / "logs" / f"{name}.log").read_text().splitlines()
            if "now serving" in line
        ]
        for name in ("inference", "inference-1")
    ]
    assert len(swaps[0]) == 3 and swaps[0] == swaps[1], swaps  # every update reached both
    ports = [
        tomllib.loads((out / "configs" / f"{n}.toml").read_text())["server"]["port"]
        for n in ("inference", "inference-1")
    ]
    assert ports[1] == ports[0] + 1, ports  # each replica's own resolved config, none overwritten
