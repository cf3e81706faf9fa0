"""SLURM for the tests: Debian's slurm-wlm and munge, installed when missing (root and a
reachable Debian mirror needed). The clusters themselves (one node or several, each node in its
own network namespace, daemons stopped by their ids) are tests/integration/slurm_nodes.py."""

import os
import shutil
import subprocess

PACKAGES = ["slurm-wlm", "munge"]


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
