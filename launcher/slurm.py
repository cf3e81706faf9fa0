"""Running `rl` as a SLURM job. Outside a job, `rl` with a `[slurm]` table writes an sbatch
script (or prints it under --dry-run) and submits it; inside the job the same supervisor runs,
starting each component with `srun` on its own nodes:

  nodes 0 .. I-1   one inference server each (all of the node's GPUs; I = nodes - trainer_nodes,
                   or the one node of a one-node job, shared with everything else)
  last T nodes     the trainer, under torchrun with a rendezvous at the first trainer node
  the batch node   the orchestrator and the supervisor itself

Everything meets in the run directory, which must be on a filesystem every node shares
(checked inside the job before anything starts). Any failure ends the supervisor and with it
the job; SLURM then stops every step that is left."""

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from launcher.plan import derive_transport
from launcher.slurm_config import INSIDE_ENV, control_character
from rlcore.errors import ConfigError
from rlcore.files.readback import shown
from rlcore.files.user_files import read_user_text
from rlcore.processes import children, ports
from rlcore.processes.health import SERVER_NONCE_ENV
from rlcore.runs.admin_token import ADMIN_TOKEN_ENV
from rlcore.runs.attempt import ATTEMPT_ENV
from rlcore.runs.run_json import is_job_id, read_state
from rlcore.runs.rundir import record_state
from rlcore.runs.runguard import RL, open_run

MASTER_PORT = 29517
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED")
ENDED_STATUSES = ("finished", "failed", "stopped")
"""run.json statuses after which a submitted run's job no longer writes into it (`rl stop`
writes "stopped" once the job is cancelled or known to be over)."""


# -- outside the job: the script and its submission ------------------------------------------------
def job_script(plan, rl_toml: Path) -> str:
    """The sbatch script that runs `rl @ rl_toml` inside the job. A value written into it
    with a line break or other control character (which would start a line of its own) is a
    ConfigError naming where it came from; `submit` makes the script before writing anything."""
    slurm = plan.config.slurm
    run = plan.run
    log = run.logs.absolute() / "slurm-%j.log"
    workdir = Path.cwd()
    command = shlex.join([sys.executable, "-m", "launcher.rl", "@", str(rl_toml.absolute())])
    name = slurm.job_name or run.root.absolute().name
    check_script_values(
        {
            "output_dir": str(run.root.absolute()),
            "the current folder": str(workdir),
            "the Python interpreter": sys.executable,
        }
    )
    if slurm.template is not None:
        text = read_user_text(slurm.template, "slurm.template")
        try:
            return text.format(
                job_name=name, nodes=slurm.nodes, log=log, workdir=workdir, command=command
            )
        except (KeyError, IndexError, ValueError) as err:
            raise ConfigError(
                f"slurm.template {slurm.template}: cannot fill it in ({type(err).__name__}: "
                f"{err}): only {{job_name}}, {{nodes}}, {{log}}, {{workdir}} and {{command}} "
                "are filled in; write any other brace doubled, e.g. ${{HOME}}"
            ) from None
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={slurm.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --time={slurm.time}",
        f"#SBATCH --output={log}",
    ]
    if slurm.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={slurm.gpus_per_node}")
    if slurm.partition:
        lines.append(f"#SBATCH --partition={slurm.partition}")
    if slurm.account:
        lines.append(f"#SBATCH --account={slurm.account}")
    lines += [f"#SBATCH {line.strip()}" for line in slurm.sbatch_lines]
    lines += ["", "set -euo pipefail", f"cd {shlex.quote(str(workdir))}", *slurm.setup]
    lines += [f"export {INSIDE_ENV}=1", f"exec {command}", ""]
    return "\n".join(lines)


def check_script_values(values: dict[str, str]) -> None:
    """A ConfigError for the first value (its source: its value) with a control character."""
    for source, value in values.items():
        char = control_character(value)
        if char:
            shown = repr(value)
            raise ConfigError(
                f"{source} {shown} holds a line break or other control character ({char}), "
                "which would start a line of its own in the SLURM job script: use a name "
                "without one"
            )


def submit(plan, write_configs) -> int:
    """Write the resolved configs and the script into the run directory, `sbatch` it, record
    the job id in run.json; the launcher's exit code."""
    if shutil.which("sbatch") is None:
        raise ConfigError(
            "[slurm] is set but `sbatch` is not on PATH: run rl on a SLURM login node, or drop "
            "the [slurm] table to run here"
        )
    run = plan.run
    text = job_script(plan, run.config_file("rl"))  # a bad template is refused before a write
    check_no_job(run, "output_dir")
    run_id = open_run(run.root, RL)  # an rl run, never beside another rl nor a component alone
    write_configs(plan)
    os.environ.update(plan.secret_env)  # sbatch exports them to the job, never to a file
    run.logs.mkdir(parents=True, exist_ok=True)
    script = run.root / "slurm" / "job.sbatch"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(text)
    comment = f"--comment={job_comment(run.root, run_id)}"  # how `rl stop` proves the job
    done = children.run(
        ["sbatch", "--parsable", comment, str(script)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise ConfigError(f"sbatch {script} failed: {done.stderr.strip() or done.stdout.strip()}")
    job_id = done.stdout.strip().split(";")[0]
    record_state(run, "submitted", slurm_job_id=job_id)
    print(f"rl: submitted SLURM job {job_id} ({script})", flush=True)
    print(f"rl: follow it with: rl status {run.root} | rl logs {run.root} -f | rl stop {run.root}")
    return 0


JOB_COMMENT = "rl-run:{run_id}:{folder}"
"""The comment `rl` gives the job it submits (sbatch --comment): the run's id (its marker) and
folder, which the scheduler keeps and reports, so that a job id read back from run.json is
acted on only while the scheduler says the job is this very run's (`prove_job`)."""


def job_comment(root: Path, run_id: str) -> str:
    return JOB_COMMENT.format(run_id=run_id, folder=root.resolve())


@dataclass(frozen=True)
class Job:
    """What the scheduler says of a job: its state (None: it no longer knows the job, which
    is over) and the comment it was submitted with ('' when none)."""

    id: str
    state: str | None
    comment: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


def query_job(job_id: str) -> Job | None:
    """The job `job_id` (a checked job id, rlcore.runs.run_json) as squeue, or else scontrol,
    reports it; None when neither is here or answers (nobody can tell). The id travels as
    `--jobs=ID` and after the words of `scontrol show job`, where no id can be an option."""
    assert is_job_id(job_id), job_id
    done = ask_slurm(["squeue", "-h", f"--jobs={job_id}", "-o", "%T|%k"])
    if done is not None and done.returncode == 0 and done.stdout.strip():
        state, _, comment = done.stdout.strip().splitlines()[0].partition("|")
        return Job(job_id, state.strip() or None, comment.strip())
    if done is not None and "invalid job id" in done.stderr.lower():
        return Job(job_id, None)
    # squeue lists pending and running jobs only; scontrol still knows a finished one's state
    not_running = done is not None and done.returncode == 0
    done = ask_slurm(["scontrol", "show", "job", job_id])
    if done is None or done.returncode != 0:
        gone = not_running or (done is not None and "invalid job id" in done.stderr.lower())
        return Job(job_id, None) if gone else None
    return scontrol_job(job_id, done.stdout)


def ask_slurm(cmd: list[str]) -> subprocess.CompletedProcess | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        return children.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None


def scontrol_job(job_id: str, text: str) -> Job:
    """`scontrol show job`'s answer as a Job: `JobState=` is one word among others on its
    line, `Comment=` the rest of its line."""
    state, comment = None, ""
    for line in text.splitlines():
        for word in line.split():
            if word.startswith("JobState="):
                state = word.split("=", 1)[1]
        if line.strip().startswith("Comment="):
            comment = line.strip().split("=", 1)[1].strip()
    return Job(job_id, state, "" if comment == "(null)" else comment)


def job_state(job_id: str) -> str | None:
    """The job's state (PENDING, RUNNING, COMPLETED, FAILED, ...) from squeue or scontrol."""
    job = query_job(job_id)
    return None if job is None else job.state


def prove_job(job: Job, root: Path) -> str | None:
    """None when the scheduler's record of `job` names the run in `root` (JOB_COMMENT: its id
    and folder); else why not, one clause naming the job, as `procs.verify` names a pid."""
    from rlcore.runs.ownership import read_run_id

    run_id = read_run_id(root)
    if run_id is not None and job.comment == job_comment(root, run_id):
        return None
    if not job.comment:
        return (
            f"SLURM job {job.id} carries no rl-run comment (submitted by an older rl, or by "
            "someone else), so it cannot be proved to be this run's job"
        )
    return (
        f"SLURM job {job.id} is not this run's job: its comment ({shown(job.comment, 120)}) "
        "names another run or folder (the number was reused, or this folder is a copy)"
    )


def unfinished_job(run, state: dict) -> str | None:
    """The SLURM job a run's run.json says it was submitted to and that may still write into
    it: not finished, failed or stopped, not known to be over, and not proved another run's
    (its comment names another run); None otherwise, and inside that very job (its own rl)."""
    job_id = state.get("slurm_job_id")
    if not job_id or state.get("status") in ENDED_STATUSES:
        return None
    if os.environ.get("SLURM_JOB_ID") == str(job_id):
        return None
    job = query_job(str(job_id))
    if job is None:
        return str(job_id)  # nobody can tell: it may run
    if not job.active or (job.comment and prove_job(job, run.root) is not None):
        return None
    return str(job_id)


def check_no_job(run, what: str) -> None:
    """A ConfigError naming `what` when run.json says a SLURM job may still run in `run`."""
    job = unfinished_job(run, read_state(run.root).data)
    if job is not None:
        raise ConfigError(
            f"{what} {str(run.root)!r} was submitted to SLURM as job {job}, which has not "
            f"finished: nothing was changed. Stop it with `rl stop {run.root}` (or wait for the "
            "job to end), then try again"
        )


def cancel(job_id: str) -> bool:
    """scancel the job (a checked id, after `--`: never an option such as `--me`)."""
    assert is_job_id(job_id), job_id
    try:
        return children.run(["scancel", "--", job_id], timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


# -- inside the job: placing the components ------------------------------------------------------
def job_hosts() -> list[str]:
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    try:
        out = children.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise ConfigError(f"cannot list the job's nodes with scontrol: {err}") from None
    hosts = out.stdout.split()
    if not hosts:
        raise ConfigError(f"cannot list the job's nodes ({nodelist!r}): {out.stderr.strip()}")
    return hosts


def srun_prefix(hosts: list[str], overlap: bool) -> list[str]:
    """One task on each of `hosts`. `--ntasks` is explicit: the job's own SLURM_NTASKS (one
    per node of the whole job), inherited by srun, would ask a one-node step for every task."""
    cmd = ["srun", f"--nodes={len(hosts)}", f"--ntasks={len(hosts)}", "--ntasks-per-node=1"]
    cmd += [f"--nodelist={','.join(hosts)}"]
    cmd += ["--kill-on-bad-exit=1", "--export=ALL"]
    return cmd + (["--overlap"] if overlap else [])


def check_shared(run_root: Path, hosts: list[str]) -> None:
    """Every node must see the run directory: a file written here is looked for on each."""
    if len(hosts) < 2:
        return
    probe = run_root.absolute() / f".shared-probe-{os.environ.get('SLURM_JOB_ID', 'x')}"
    probe.write_text("rl\n")
    try:
        cmd = [*srun_prefix(hosts, overlap=True), "test", "-f", str(probe)]
        done = children.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"checking that all nodes see {run_root} took over 300 s") from None
    finally:
        probe.unlink(missing_ok=True)
    if done.returncode != 0:
        raise ConfigError(
            f"output_dir {run_root.absolute()} is not on a filesystem all nodes share "
            f"({', '.join(hosts)}): rollouts, weights and checkpoints travel through it; put it "
            "on the cluster's shared filesystem"
        )


def place_in_job(plan) -> None:
    """Inside the job: put each component on its nodes (module docstring), fill the settings
    that depend on the nodes (servers' addresses, the trainer's rendezvous) and check that the
    run directory is shared."""
    config, slurm = plan.config, plan.config.slurm
    hosts = job_hosts()
    if len(hosts) != slurm.nodes:
        raise ConfigError(f"the job has {len(hosts)} node(s) but slurm.nodes = {slurm.nodes}")
    check_shared(plan.run.root, hosts)
    if len(hosts) == 1:
        plan.placement = {name: hosts for name in (*plan.inference_names, "trainer")}
        return
    inference_hosts, trainer_hosts = hosts[: slurm.inference_nodes], hosts[-slurm.trainer_nodes :]
    config.inference.replicas = len(inference_hosts)
    config.inference.server.host = "0.0.0.0"
    port = config.inference.server.port
    ports.release_all()  # each node's server reserves its own port there (this one's too)
    if port is None or "inference.server.port" in plan.machine_chosen:  # the rule, per node
        port = config.inference.server.port = port_free_on(inference_hosts)
    urls = [f"http://{h}:{port + i}" for i, h in enumerate(inference_hosts)]
    plan.ports_note = f"Inference: {', '.join(urls)} (each on its node)"
    config.orchestrator.client.base_url = [f"{url}/v1" for url in urls]
    config.trainer.nodes = len(trainer_hosts)
    node_gpus = list(range(slurm.gpus_per_node))
    if node_gpus:  # each server data-parallel over its node's GPUs
        config.inference.parallel.dp = max(1, len(node_gpus) // config.inference.parallel.tp)
    names = plan.inference_names
    plan.placement = {name: [host] for name, host in zip(names, inference_hosts, strict=True)}
    plan.placement["trainer"] = trainer_hosts
    plan.urls = dict(zip(names, urls, strict=True))
    plan.gpu_map = {"orchestrator": [], "trainer": node_gpus, **dict.fromkeys(names, node_gpus)}
    plan.extra_env["trainer"] = {"MASTER_ADDR": trainer_hosts[0], "MASTER_PORT": str(MASTER_PORT)}
    derive_transport(config, plan.gpu_map, trainer_hosts[0], listen_port_on(trainer_hosts[0]))
    plan.wrappers = {name: srun_wrapper(plan, name) for name in plan.placement}


PORT_TAKEN = 3
PORT_PROBE = f"""import socket, sys
with socket.socket() as sock:
    try:
        sock.bind(("", int(sys.argv[1])))
    except OSError:
        sys.exit({PORT_TAKEN})
    print(sock.getsockname()[1])
"""


def listen_port_on(host: str):
    """`Deployment.listen_port` on the job's node `host`: a one-task step there binds the port
    (or one the OS picks) on all of the node's addresses and says which it got."""

    def listen_port(port: int | None) -> int | None:
        cmd = [*srun_prefix([host], overlap=True), sys.executable, "-c", PORT_PROBE, str(port or 0)]
        try:
            done = children.run(cmd, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"checking a TCP port on node {host} took over 300 s") from None
        if done.returncode == PORT_TAKEN:
            return None
        words = done.stdout.split()
        if done.returncode != 0 or not words or not words[-1].isdigit():
            raise ConfigError(f"cannot check a TCP port on node {host}: {done.stderr.strip()}")
        return int(words[-1])

    return listen_port


FREE_PORTS_PROBE = """import socket, sys
first, count, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
free = []
for port in range(first, first + count):
    with socket.socket() as tcp, socket.socket(socket.AF_UNIX) as name:
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            tcp.bind(("", port))
            name.bind("\\0" + prefix + str(port))
        except OSError:
            continue
        free.append(port)
print(*free)
"""


def port_free_on(hosts: list[str]) -> int:
    """rlcore.processes.ports' rule on each of `hosts`, whose i-th server listens on the port + i:
    the first port from DEFAULT_PORT up that is free and unreserved there on every node (one
    probe step on each)."""
    free = []
    for host in hosts:
        args = [str(ports.DEFAULT_PORT), str(ports.SCAN_PORTS), ports.NAME_PREFIX]
        cmd = [*srun_prefix([host], overlap=True), sys.executable, "-c", FREE_PORTS_PROBE, *args]
        try:
            done = children.run(cmd, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"checking TCP ports on node {host} took over 300 s") from None
        if done.returncode != 0:
            raise ConfigError(f"cannot check TCP ports on node {host}: {done.stderr.strip()}")
        free.append({int(word) for word in done.stdout.split() if word.isdigit()})
    for first in range(ports.DEFAULT_PORT, ports.DEFAULT_PORT + ports.SCAN_PORTS):
        if all(first + i in on_node for i, on_node in enumerate(free)):
            return first
    raise ConfigError(
        f"no free port for the inference servers on nodes {', '.join(hosts)} from "
        f"{ports.DEFAULT_PORT} up: give one with --inference.server.port"
    )


def srun_wrapper(plan, component: str) -> list[str]:
    """What starts a component's command on its nodes, with its environment set there. Secrets
    (the admin token, literal config secrets) travel in srun's exported environment, never on
    a command line that `ps` shows; so do the attempt id and the inference nonce, new at every
    (re)start after this wrapper is made."""
    env = {**plan.env(component), **plan.extra_env.get(component, {})}
    unset = {ADMIN_TOKEN_ENV, ATTEMPT_ENV, SERVER_NONCE_ENV, *plan.secret_env}
    env = {k: v for k, v in env.items() if k not in unset}
    hosts = plan.placement[component]
    return [*srun_prefix(hosts, overlap=True), "env", *(f"{k}={v}" for k, v in env.items())]
