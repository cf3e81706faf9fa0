"""Holding processes to a small share of one CPU with a cgroup, for tests of runs that are slow
but healthy: cgroup v2 (`cpu.max`) or, where the cpu controller is on a v1 hierarchy,
`cpu.cfs_quota_us`. Needs root and a cpu controller it may write; `CpuCap.create` says why not
otherwise. The processes keep running (state R or S, never T): only their CPU time is rationed.
"""

from dataclasses import dataclass
from pathlib import Path

import psutil

from rlcore.processes.poll import wait_until

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


@dataclass
class CpuCap:
    folder: Path
    home: Path
    """The cgroup the processes return to when the cap is removed (this process's own)."""

    @classmethod
    def create(cls, name: str, share: float) -> tuple["CpuCap | None", str]:
        """A new cgroup `name` whose processes together get `share` of one core; (None, why)
        where this machine has no cpu controller this process can use."""
        quota = max(1000, int(share * PERIOD_US))
        v2 = CGROUP_ROOT / "cgroup.controllers"
        try:
            if v2.exists() and "cpu" in v2.read_text().split():
                return cls.create_v2(name, quota), ""
            v1 = next(
                (
                    p
                    for p in (CGROUP_ROOT / "cpu", CGROUP_ROOT / "cpu,cpuacct")
                    if (p / "cpu.cfs_quota_us").exists()
                ),
                None,
            )
            if v1 is None:
                return None, "no cgroup cpu controller (v2 cpu.max or v1 cpu.cfs_quota_us)"
            return cls.create_v1(v1, name, quota), ""
        except OSError as err:
            return None, f"cannot make a cgroup with a CPU limit here: {err}"

    @classmethod
    def create_v2(cls, name: str, quota: int) -> "CpuCap":
        """A child of the root cgroup, which may hold processes and still enable `cpu` for
        its children."""
        if "cpu" not in (CGROUP_ROOT / "cgroup.subtree_control").read_text().split():
            (CGROUP_ROOT / "cgroup.subtree_control").write_text("+cpu")
        folder = CGROUP_ROOT / name
        folder.mkdir(exist_ok=True)
        (folder / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        return cls(folder, CGROUP_ROOT / own_cgroup("")[1:])

    @classmethod
    def create_v1(cls, mount: Path, name: str, quota: int) -> "CpuCap":
        folder = mount / name
        folder.mkdir(exist_ok=True)
        (folder / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (folder / "cpu.cfs_quota_us").write_text(str(quota))
        return cls(folder, mount / own_cgroup("cpu")[1:])

    def hold(self, pid: int) -> None:
        """Move `pid` and all its descendants into the cgroup (the ones they start later are
        born in it)."""
        try:
            root = psutil.Process(pid)
            pids = [pid, *(p.pid for p in root.children(recursive=True))]
        except psutil.Error:
            return
        held = set(self.pids())
        for member in pids:
            if member not in held:
                try:
                    (self.folder / "cgroup.procs").write_text(str(member))
                except OSError:
                    pass  # it has exited meanwhile

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.folder / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def throttled(self) -> int:
        """How many periods the cgroup's processes wanted more CPU than it allows."""
        for line in (self.folder / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "nr_throttled":
                return int(value)
        return 0

    def remove(self) -> None:
        """Move what is left back home, then delete the cgroup."""
        failed: list[OSError] = []

        def removed() -> bool:
            for pid in self.pids():
                try:
                    (self.home / "cgroup.procs").write_text(str(pid))
                except OSError:
                    pass
            try:
                self.folder.rmdir()
                return True
            except OSError as err:
                failed[:] = [err]
                return False

        try:
            wait_until(removed, 10, 0.2, f"the cgroup {self.folder} to be removed")
        except TimeoutError:
            raise failed[-1] from None  # why the last rmdir failed


def own_cgroup(controller: str) -> str:
    """This process's cgroup path for `controller` ("" for the v2 hierarchy)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(",") or controllers == controller:
            return path
    return "/"
