"""A real SLURM cluster of several nodes on one machine, for the tests: one `slurmctld` on the
host and one `slurmd` per node, each node in its own network namespace (`ip netns`) with its
own hostname (a UTS namespace) and its own address on a Linux bridge (a veth pair each), all
reaching the controller at the bridge's address. The filesystem is shared (no mount namespace
beyond a private /etc/hosts that names every node), and so is one private `munged` (its socket
is a file the config names). Needs root with network and mount namespaces and Debian's
slurm-wlm and munge (installed by tests/integration/slurm_cluster.py when missing).

`MultiNodeCluster.start()` returns None once every node is idle, else why the cluster cannot
run here; `stop()` (also on a failed start) leaves no daemon, job, namespace, bridge or veth
behind. Everything it creates carries a random tag, so two clusters never share a name, and it
stops only the processes it started (by their ids) and those inside its own namespaces."""

import ipaddress
import os
import secrets
import shutil
import signal
import socket
import subprocess
from contextlib import contextmanager, suppress
from pathlib import Path

from rlcore.processes.poll import wait_until
from tests.integration.slurm_cluster import install


def run(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.0.0.0/8 that no interface of this machine is on."""
    used = run(["ip", "-4", "-o", "addr"]).stdout
    for _ in range(100):
        second, third = secrets.randbelow(50) + 200, secrets.randbelow(250)
        net = ipaddress.ip_network(f"10.{second}.{third}.0/24")
        if f"10.{second}.{third}." not in used:
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet found")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def unavailable() -> str | None:
    """Why a cluster of namespaces cannot start here, found cheaply (nothing installed or
    started: one probe namespace made and deleted); None when it can."""
    if os.geteuid() != 0:
        return "a cluster of network namespaces needs root"
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if shutil.which("slurmd") is None and shutil.which("apt-get") is None:
        return "SLURM is not installed and there is no apt-get to install it"
    probe = f"rlprobe{secrets.token_hex(3)}"
    made = run(["ip", "netns", "add", probe])
    run(["ip", "netns", "del", probe])
    if made.returncode != 0:
        return f"network namespaces are not allowed here ({made.stderr.strip()})"
    return None


class MultiNodeCluster:
    """`num_nodes` SLURM nodes (node1, node2, ...) on this machine; `env` is what a client
    (`sbatch`, `rl`) needs to talk to it. `private_names`: more names of a node that only that
    node resolves (as a name missing from the other nodes' DNS on a real cluster)."""

    def __init__(self, state: Path, num_nodes: int = 3, private_names: dict | None = None):
        self.private_names = private_names or {}
        self.state = state
        self.tag = secrets.token_hex(2)
        self.nodes = [f"node{i + 1}" for i in range(num_nodes)]
        self.subnet = free_subnet()
        hosts = list(self.subnet.hosts())
        self.bridge_address = str(hosts[0])
        self.addresses = {node: str(hosts[10 + i]) for i, node in enumerate(self.nodes)}
        self.bridge = f"rlbr{self.tag}"
        self.namespaces = {node: f"rl{self.tag}{node}" for node in self.nodes}
        self.veths = {node: f"rlv{self.tag}n{i}" for i, node in enumerate(self.nodes)}
        self.conf = state / "slurm.conf"
        self.host = socket.gethostname().split(".")[0]
        self.daemons: list[subprocess.Popen] = []
        self.made_links: list[str] = []
        self.made_namespaces: list[str] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # -- start -------------------------------------------------------------------------------
    def start(self) -> str | None:
        if os.geteuid() != 0:
            return "a cluster of network namespaces needs root"
        reason = install()
        if reason is not None:
            return reason
        for tool in ("ip", "nsenter", "unshare", "slurmd", "slurmctld", "munged", "mungekey"):
            if shutil.which(tool) is None:
                return f"{tool} is not installed"
        try:
            reason = self.network() or self.munge() or self.daemons_up()
        except (OSError, subprocess.SubprocessError, RuntimeError) as err:
            reason = f"{type(err).__name__}: {err}"
        if reason is not None:
            self.stop()
        return reason

    def network(self) -> str | None:
        """The bridge on the host and one namespace per node joined to it by a veth."""
        prefix = self.subnet.prefixlen
        steps = [["ip", "link", "add", self.bridge, "type", "bridge"]]
        steps += [["ip", "addr", "add", f"{self.bridge_address}/{prefix}", "dev", self.bridge]]
        steps += [["ip", "link", "set", self.bridge, "up"]]
        for step in steps:
            if (done := run(step)).returncode != 0:
                return f"{' '.join(step)}: {done.stderr.strip()}"
            if step[2] == "add" and step[1] == "link":
                self.made_links.append(self.bridge)
        for node in self.nodes:
            ns, veth = self.namespaces[node], self.veths[node]
            if (done := run(["ip", "netns", "add", ns])).returncode != 0:
                return f"ip netns add {ns}: {done.stderr.strip()}"
            self.made_namespaces.append(ns)
            if (
                done := run(["ip", "link", "add", veth, "type", "veth", "peer", "name", veth + "p"])
            ).returncode != 0:  # noqa: E501
                return f"ip link add {veth}: {done.stderr.strip()}"
            self.made_links.append(veth)
            inside = ["ip", "netns", "exec", ns, "ip"]
            for step in (
                ["ip", "link", "set", veth + "p", "netns", ns],
                ["ip", "link", "set", veth, "master", self.bridge],
                ["ip", "link", "set", veth, "up"],
                [*inside, "link", "set", veth + "p", "name", "eth0"],
                [*inside, "addr", "add", f"{self.addresses[node]}/{prefix}", "dev", "eth0"],
                [*inside, "link", "set", "eth0", "up"],
                [*inside, "link", "set", "lo", "up"],
            ):
                if (done := run(step)).returncode != 0:
                    return f"{' '.join(step)}: {done.stderr.strip()}"
        common = f"127.0.0.1 localhost\n{self.bridge_address} {self.host}\n" + "".join(
            f"{address} {node}\n" for node, address in self.addresses.items()
        )
        for node, address in self.addresses.items():
            private = " ".join(self.private_names.get(node, []))
            extra = f"{address} {private}\n" if private else ""
            (self.state / f"hosts-{node}").write_text(common + extra)
        return None

    def munge(self) -> str | None:
        """A private munged: its own key and socket in the state folder."""
        folder = self.state / "munge"
        folder.mkdir(mode=0o700)
        key = folder / "munge.key"
        if (done := run(["mungekey", "--create", f"--keyfile={key}"])).returncode != 0:
            return f"mungekey: {done.stderr.strip()}"
        key.chmod(0o400)
        self.socket = folder / "munge.socket"
        files = {name: folder / f"munged.{name}" for name in ("log", "pid", "seed")}
        cmd = ["munged", "--foreground", "--force", f"--socket={self.socket}", f"--key-file={key}"]
        cmd += [f"--{name}-file={path}" for name, path in files.items()]
        self.spawn(cmd, folder / "munged.out")
        munged = self.daemons[-1]
        with suppress(TimeoutError):  # said below
            wait_until(lambda: self.socket.exists() or munged.poll() is not None, 30, 0.2, "munged")
        if not self.socket.exists():
            return f"munged did not start: {(folder / 'munged.out').read_text()[-300:]}"
        return None

    def slurm_conf(self) -> str:
        nodes = "".join(
            f"NodeName={node} NodeAddr={address} NodeHostname={node} CPUs={os.cpu_count()} "
            "RealMemory=1000 State=UNKNOWN\n"
            for node, address in self.addresses.items()
        )
        state = self.state
        return f"""ClusterName=rl{self.tag}
SlurmctldHost={self.host}({self.bridge_address})
SlurmctldPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation={state}/ctld
SlurmdSpoolDir={state}/%n
SlurmctldPidFile={state}/slurmctld.pid
SlurmdPidFile={state}/slurmd-%n.pid
SlurmctldLogFile={state}/slurmctld.log
SlurmdLogFile={state}/slurmd-%n.log
KillWait=10
MinJobAge=3600
{nodes}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

    def daemons_up(self) -> str | None:
        (self.state / "ctld").mkdir()
        self.conf.write_text(self.slurm_conf())
        self.spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], self.state / "slurmctld.out")
        for node in self.nodes:
            (self.state / node).mkdir()
            hosts = self.state / f"hosts-{node}"
            inner = f"mount --bind {hosts} /etc/hosts && hostname {node} && exec slurmd -D -N {node} -f {self.conf}"  # noqa: E501
            cmd = [
                "nsenter",
                f"--net=/run/netns/{self.namespaces[node]}",
                "unshare",
                "--uts",
                "--mount",
                "sh",
                "-c",
                inner,
            ]
            self.spawn(cmd, self.state / f"slurmd-{node}.out")
        states = ""

        def settled() -> str | None:
            """`idle` once every node is, `exited` once a daemon has (None: not yet)."""
            nonlocal states
            if any(daemon.poll() is not None for daemon in self.daemons):
                return "exited"
            states = self.client(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout
            idle = [line for line in states.splitlines() if line.split()[-1] in ("idle", "mixed")]
            return "idle" if len(idle) == len(self.nodes) else None

        with suppress(TimeoutError):  # said below
            if wait_until(settled, 120, 1, "the SLURM nodes to become idle") == "idle":
                return None
        logs = ""
        for log in sorted(self.state.glob("*.out")) + sorted(self.state.glob("*.log")):
            logs += f"\n--- {log.name}\n{log.read_text()[-600:]}"
        return f"the SLURM nodes did not all become idle within 120 s: {states!r}{logs}"

    def spawn(self, cmd: list[str], log: Path) -> None:
        with log.open("w") as out:
            self.daemons.append(
                subprocess.Popen(
                    cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=self.env
                )
            )

    def client(self, cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        """A SLURM client command against this cluster."""
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env)

    # -- stop --------------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel every job, stop the daemons, kill what is left in the nodes' namespaces,
        delete the namespaces, veths and bridge, and wait until they are gone."""
        if self.daemons and self.daemons[-1].poll() is None and self.conf.exists():
            try:
                self.client(["scancel", "--full", "--user=root"], 30)
                wait_until(
                    lambda: not self.client(["squeue", "-h"], 20).stdout,
                    30,
                    1,
                    "the cancelled jobs to leave squeue",
                )
            except (subprocess.SubprocessError, TimeoutError):
                pass
        for daemon in reversed(self.daemons):  # the slurmds first, munged last
            stop_process(daemon)
        for ns in self.made_namespaces:
            pids = run(["ip", "netns", "pids", ns]).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for ns in self.made_namespaces:
            run(["ip", "netns", "del", ns])
        for link in reversed(self.made_links):
            run(["ip", "link", "del", link])

        def cleared() -> bool:
            left = self.leftovers()
            for link in left:
                run(["ip", "link", "del", link])
            return not left

        with suppress(TimeoutError):  # gone or not, as before: stop() does not fail on it
            wait_until(cleared, 30, 0.5, "the cluster's namespaces and links to go")
        self.made_namespaces, self.made_links = [], []

    def leftovers(self) -> list[str]:
        """Namespaces and links of this cluster that still exist."""
        names = run(["ip", "netns", "list"]).stdout + run(["ip", "-o", "link"]).stdout
        return [
            name
            for name in (*self.namespaces.values(), *self.veths.values(), self.bridge)
            if name in names
        ]


def stop_process(proc: subprocess.Popen, grace_s: float = 20) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextmanager
def serving(nodes: "MultiNodeCluster"):
    """SLURM_CONF pointed at the started cluster for the block (squeue/scontrol here and in
    `rl`), then restored and the cluster stopped."""
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(nodes.conf)
    try:
        yield nodes
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        nodes.stop()


def wait_for_job(job_id: str, timeout_s: float = 1500) -> str:
    """The job's final state, once SLURM no longer lists it as pending or running."""
    from launcher.slurm import ACTIVE_STATES, job_state

    state = None

    def final_state() -> str | None:
        nonlocal state
        state = job_state(job_id)
        return None if state in ACTIVE_STATES else state or "unknown"

    try:
        return wait_until(final_state, timeout_s, 2, f"job {job_id} to end")
    except TimeoutError:
        raise AssertionError(f"job {job_id} still {state}") from None
