"""A real one-node SLURM cluster for the tests: Debian's slurm-wlm and munge, installed when
missing (root and a reachable Debian mirror needed), configured for this machine and started.
`start_cluster` returns None when the cluster answers, else why it cannot run here."""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

PACKAGES = ["slurm-wlm", "munge"]


def run(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def install() -> str | None:
    if shutil.which("sbatch") and shutil.which("slurmctld") and shutil.which("munged"):
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "SLURM is not installed and this is not a root Debian machine to install it on"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        update = subprocess.run(["apt-get", "update"], capture_output=True, timeout=600, env=env)
        if update.returncode == 0:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        return f"apt-get install {' '.join(PACKAGES)} failed: {done.stderr.strip()[-300:]}"
    return None


def slurm_conf(state: Path, host: str) -> str:
    memory_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20 - 2048
    return f"""ClusterName=rltest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation={state}/ctld
SlurmdSpoolDir={state}/d
SlurmctldPidFile={state}/slurmctld.pid
SlurmdPidFile={state}/slurmd.pid
SlurmctldLogFile={state}/slurmctld.log
SlurmdLogFile={state}/slurmd.log
KillWait=10
MinJobAge=3600
NodeName={host} CPUs={os.cpu_count()} RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def start_cluster(state: Path) -> str | None:
    reason = install()
    if reason is not None:
        return reason
    host = socket.gethostname().split(".")[0]
    for folder in (state / "ctld", state / "d"):
        folder.mkdir(parents=True, exist_ok=True)
    conf = Path("/etc/slurm/slurm.conf")
    conf.write_text(slurm_conf(state, host))
    if not Path("/etc/munge/munge.key").exists():
        run(["mungekey", "--create"])
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    if run(["munge", "-n"]).returncode != 0:
        run(["munged", "--force"])
    run(["pkill", "-x", "slurmctld"])
    run(["pkill", "-x", "slurmd"])
    time.sleep(1)
    for daemon in (["slurmctld", "-i"], ["slurmd"]):
        done = run(daemon)
        if done.returncode != 0:
            return f"{daemon[0]} did not start: {done.stderr.strip()[-300:]}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state_now = run(["sinfo", "-h", "-o", "%T"]).stdout.strip()
        if state_now in ("idle", "mixed", "allocated"):
            return None
        if state_now.startswith("down") or state_now.startswith("drain"):
            run(["scontrol", "update", f"nodename={host}", "state=resume"])
        time.sleep(1)
    log = (state / "slurmctld.log").read_text()[-500:] if (state / "slurmctld.log").exists() else ""
    return f"the SLURM node did not become idle within 60 s: {state_now!r} {log}"


def stop_cluster() -> None:
    run(["pkill", "-x", "slurmd"])
    run(["pkill", "-x", "slurmctld"])
