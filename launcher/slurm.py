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
from pathlib import Path

from launcher.plan import derive_transport
from launcher.slurm_config import INSIDE_ENV, control_character
from rlcore import children
from rlcore.admin_token import ADMIN_TOKEN_ENV
from rlcore.attempt import ATTEMPT_ENV
from rlcore.errors import ConfigError
from rlcore.health import SERVER_NONCE_ENV
from rlcore.rundir import record_state
from rlcore.runguard import RL, open_run
from rlcore.user_files import read_user_text

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
    check_script_values({"output_dir": str(run.root.absolute()), "the current folder": str(workdir),
                         "the Python interpreter": sys.executable})  # fmt: skip
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
    open_run(run.root, RL)  # an rl run, never beside another rl nor a component started alone
    write_configs(plan)
    os.environ.update(plan.secret_env)  # sbatch exports them to the job, never to a file
    run.logs.mkdir(parents=True, exist_ok=True)
    script = run.root / "slurm" / "job.sbatch"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(text)
    done = children.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True)
    if done.returncode != 0:
        raise ConfigError(f"sbatch {script} failed: {done.stderr.strip() or done.stdout.strip()}")
    job_id = done.stdout.strip().split(";")[0]
    record_state(run, "submitted", slurm_job_id=job_id)
    print(f"rl: submitted SLURM job {job_id} ({script})", flush=True)
    print(f"rl: follow it with: rl status {run.root} | rl logs {run.root} -f | rl stop {run.root}")
    return 0


def job_state(job_id: str) -> str | None:
    """The job's state (PENDING, RUNNING, COMPLETED, FAILED, ...) from squeue or scontrol."""
    for cmd in (
        ["squeue", "-h", "-j", job_id, "-o", "%T"],
        ["scontrol", "show", "job", job_id],
    ):
        try:
            out = children.run(cmd, capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        if cmd[0] == "squeue" and out.strip():
            return out.strip().splitlines()[0]
        for field in out.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
    return None


def job_over(job_id: str) -> bool:
    """Whether squeue says the job has ended (listed in no active state, or no longer known);
    False when squeue is not here or does not answer: then nobody can tell."""
    if shutil.which("squeue") is None:
        return False
    try:
        done = children.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                              text=True, timeout=20)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    if done.returncode == 0:
        return not any(state in ACTIVE_STATES for state in done.stdout.split())
    return "invalid job id" in done.stderr.lower()


def unfinished_job(state: dict) -> str | None:
    """The SLURM job a run's run.json says it was submitted to and that may still write into
    it (not finished, failed or stopped, and not known to be over); None otherwise, and inside
    that very job (its own rl)."""
    job = state.get("slurm_job_id")
    if not job or state.get("status") in ENDED_STATUSES:
        return None
    if os.environ.get("SLURM_JOB_ID") == str(job) or job_over(str(job)):
        return None
    return str(job)


def check_no_job(run, what: str) -> None:
    """A ConfigError naming `what` when run.json says a SLURM job may still run in `run`."""
    from launcher.commands.runs import read_state

    job = unfinished_job(read_state(run).data)
    if job is not None:
        raise ConfigError(
            f"{what} {str(run.root)!r} was submitted to SLURM as job {job}, which has not "
            f"finished: nothing was changed. Stop it with `rl stop {run.root}` (or wait for the "
            "job to end), then try again"
        )


def cancel(job_id: str) -> bool:
    try:
        return children.run(["scancel", job_id], timeout=30).returncode == 0
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
    urls = [f"http://{h}:{port + i}" for i, h in enumerate(inference_hosts)]
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
