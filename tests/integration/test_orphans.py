"""`kill -9` of a launcher at any phase leaves nothing of it alive 10 s later: `rl`, `rl sft`,
`evals` starting its own inference server, and `rl eval` (rlcore.processes.children: every child
leads its own session and gets SIGTERM when its launcher dies; inference then stops its engine), and
the grandchildren in sessions of their own: an environment's MCP servers (the orchestrator
stops its descendants) and torchrun's ranks (torchrun stops them). Every process a command
starts carries a mark in its environment (helpers.marked), so a survivor is found however it
was regrouped or reparented."""

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.integration.helpers import (
    MARK_ENV,
    REPO,
    describe,
    free_port,
    gone_within,
    kill_marked,
    marked,
    run_state,
    tiny_rl_toml,
    wait_for,
)
from tests.integration.test_mcp_tasks import task, tasks_data, tasks_toml

pytestmark = pytest.mark.integration
KILLED_WITHIN_S = 10.0


def launch(argv: list[str], log: Path, mark: str | None = None) -> tuple[subprocess.Popen, str]:
    """`python -m MODULE ...` in a session of its own, marked (`mark`, default a new one);
    (process, mark)."""
    mark = mark or uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-m", *argv],
        cwd=REPO,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, MARK_ENV: mark},
    )
    return proc, mark


def kill_9_and_measure(proc: subprocess.Popen, mark: str, what: str) -> float:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    took_s = gone_within(mark, KILLED_WITHIN_S)
    print(f"kill -9 of {what}: every process gone in {took_s:.1f} s")
    return took_s


# -- rl ----------------------------------------------------------------------------------------
def engine_loading(out: Path) -> bool:
    """Inference has started its engine process, which loads the model."""
    log = out / "logs" / "inference.log"
    return log.exists() and "EngineCore" in log.read_text(errors="replace")


RL_MOMENTS = {
    # the three components just started (the orchestrator waits for inference)
    "starting": lambda out: len(run_state(out).get("pids", {})) == 3,
    "engine-loading": engine_loading,
    "running": lambda out: (out / "metrics.jsonl").exists(),
}


@pytest.mark.parametrize(
    "moment",
    ["engine-loading", *(pytest.param(m, marks=pytest.mark.slow) for m in ("starting", "running"))],
)
def test_kill_9_of_rl_leaves_no_process(tiny_model_dir, tmp_path, moment):
    out, config, log = tmp_path / "run", tmp_path / "rl.toml", tmp_path / "rl.log"
    config.write_text(tiny_rl_toml(tiny_model_dir, out, free_port(), max_steps=50))
    rl, mark = launch(["launcher.rl", "@", str(config)], log)
    try:
        wait_for(lambda: RL_MOMENTS[moment](out), 600, moment, interval_s=0.1, proc=rl, log=log)
        kill_9_and_measure(rl, mark, f"rl ({moment})")
    finally:
        kill_marked(mark)


# -- rl sft ------------------------------------------------------------------------------------
def sft_config(tmp_path: Path, model: Path, out: Path) -> Path:
    rows = tmp_path / "train.jsonl"
    rows.write_text(
        "".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": f"What is {i} + 1?"},
                        {"role": "assistant", "content": str(i + 1)},
                    ]
                }
            )
            + "\n"
            for i in range(16)
        )
    )
    config = tmp_path / "sft.toml"
    config.write_text(
        f'max_steps = 2000\nseq_len = 64\noutput_dir = "{out}"\n'
        f'[model]\nname = "{model}"\ndtype = "float32"\n[optim]\nlr = 1e-3\n'
        f'[data]\nname = "{rows}"\nbatch_size = 8\n'
    )
    return config


SFT_MOMENTS = {
    "starting": lambda out: "sft" in run_state(out).get("pids", {}),
    "training": lambda out: (out / "metrics.jsonl").exists(),
}


@pytest.mark.parametrize("moment", ["training", pytest.param("starting", marks=pytest.mark.slow)])
def test_kill_9_of_rl_sft_leaves_no_trainer(tiny_model_dir, tmp_path, moment):
    """The `sft` child ran on as an orphan holding no lock: `rl delete` then succeeded and the
    orphan wrote the folder again, unmarked."""
    out, log = tmp_path / "run", tmp_path / "rl-sft.log"
    config = sft_config(tmp_path, tiny_model_dir, out)
    rl_sft, mark = launch(["launcher.rl", "sft", "@", str(config)], log)
    try:
        wait_for(
            lambda: SFT_MOMENTS[moment](out), 600, moment, interval_s=0.1, proc=rl_sft, log=log
        )
        kill_9_and_measure(rl_sft, mark, f"rl sft ({moment})")
    finally:
        kill_marked(mark)


# -- evals and rl eval with their own server ---------------------------------------------------
def eval_config(tmp_path: Path, model: Path, out: Path) -> Path:
    config = tmp_path / "eval.toml"
    config.write_text(
        f'output_dir = "{out}"\nseq_len = 256\n[model]\nname = "{model}"\n'
        "[sampling]\nmax_tokens = 8\n"
        '[[eval.env]]\nid = "rl-add-digits"\nnum_examples = 4\nrollouts_per_example = 3\n'
        '[inference]\nmodel = { dtype = "float32" }\ncpu = { kvcache_space_gib = 1 }\n'
    )
    return config


def server_starting(out: Path) -> bool:
    """The evaluation's own server has started and says it is starting vLLM."""
    log = out / "inference.log"
    return log.exists() and "starting vLLM" in log.read_text(errors="replace")


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["orchestrator.evals.main"], id="evals"),
        # `rl eval` execs evals: the same process, so the default run checks evals alone
        pytest.param(["launcher.rl", "eval"], id="rl-eval", marks=pytest.mark.slow),
    ],
)
def test_kill_9_of_an_evaluation_starting_its_server_leaves_no_server(
    tiny_model_dir, tmp_path, command
):
    """The server (1.9 GB resident) served on, with no owner, on its port."""
    out, log = tmp_path / "eval", tmp_path / "eval.log"
    config = eval_config(tmp_path, tiny_model_dir, out)
    proc, mark = launch([*command, "@", str(config)], log)
    try:
        wait_for(
            lambda: server_starting(out), 600, "its server", interval_s=0.1, proc=proc, log=log
        )
        kill_9_and_measure(proc, mark, f"{' '.join(command)} (its server starting)")
    finally:
        kill_marked(mark)


# -- grandchildren: a task's MCP server ----------------------------------------------------------
def tool_server_running(mark: str) -> bool:
    """A rollout's MCP server runs (one that never reads its input, so it does not end when the
    orchestrator's pipe to it closes)."""
    return any("time.sleep(600)" in describe([pid]) for pid in marked(mark))


@pytest.mark.slow
def test_kill_9_of_rl_leaves_no_tool_server(tiny_model_dir, tmp_path):
    """The MCP client starts each stdio server in a session of its own, out of reach of the
    SIGTERM to the orchestrator's process group: the orchestrator stops its descendants
    (without: all 8 alive 12 s later). Default tier: test_children's sessions of their own."""
    mark = uuid.uuid4().hex
    hang = {"command": "python", "args": ["-c", "import time; time.sleep(600)"]}
    tasks = [task(i, hang, tmp_path / "calls.jsonl") for i in range(2)]
    for each in tasks:
        each["mcp_config"]["locker"]["env"][MARK_ENV] = mark  # a server's environment is its own
    data, _ = tasks_data(tmp_path, tasks)
    out, config, log = tmp_path / "run", tmp_path / "rl.toml", tmp_path / "rl.log"
    config.write_text(
        tasks_toml(tiny_model_dir, data, out).replace("tool_timeout_s = 10", "tool_timeout_s = 600")
    )
    rl, _ = launch(["launcher.rl", "@", str(config)], log, mark)
    try:
        wait_for(
            lambda: tool_server_running(mark),
            600,
            "a tool server",
            interval_s=0.2,
            proc=rl,
            log=log,
        )
        kill_9_and_measure(rl, mark, "rl (its orchestrator's tool servers running)")
    finally:
        kill_marked(mark)


# -- grandchildren: torchrun's ranks -----------------------------------------------------------
TORCHRUN_LAUNCHER = """
import sys
from pathlib import Path
from rlcore.processes import children
children.start("trainer", sys.argv[2:], Path(sys.argv[1]))
sys.stdin.read()  # until the test kills this launcher
"""


@pytest.mark.slow
def test_kill_9_of_the_launcher_leaves_no_torchrun_rank(tiny_model_dir, tmp_path):
    """A trainer with several ranks is torchrun and one process per rank, each rank in a
    session of its own (torch's elastic agent starts them so): torchrun stops them on the
    SIGTERM that its launcher's death sends it."""
    out, config, log = tmp_path / "trainer", tmp_path / "trainer.toml", tmp_path / "trainer.log"
    config.write_text(
        f'max_steps = 100000\nseq_len = 32\noutput_dir = "{out}"\n[model]\n'
        f'name = "{tiny_model_dir}"\ndtype = "float32"\n[data.fake]\nbatch_size = 2\n'
    )
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "trainer.main",
        "@",
        str(config),
    ]
    mark = uuid.uuid4().hex
    launcher = subprocess.Popen(
        [sys.executable, "-c", TORCHRUN_LAUNCHER, str(log), *torchrun],
        cwd=REPO,
        stdin=subprocess.PIPE,
        env={**os.environ, MARK_ENV: mark, "OMP_NUM_THREADS": "1"},
    )
    try:
        wait_for(
            lambda: (out / "metrics.jsonl").exists(),
            300,
            "the ranks' first step",
            interval_s=0.2,
            proc=launcher,
            log=log,
        )
        ranks = [pid for pid in marked(mark) if "trainer.main" in describe([pid])]
        assert len(ranks) == 3, describe(marked(mark))  # torchrun and its two ranks
        kill_9_and_measure(launcher, mark, "a launcher of torchrun (its ranks training)")
    finally:
        kill_marked(mark)
