"""The weight-transfer seam: how a new policy travels from the trainer to inference.

One `type`-tagged config (`weight_transfer`, shared by all three processes) and one small
interface per side:

  trainer       WeightSender.publish(step)       after every optimizer step (and step 0)
  orchestrator  WeightReceiver.wait(...)         the newest policy a batch may be generated from
                WeightReceiver.swap(n, servers)  every inference server serves policy n
  inference     WeightLoader.load(body)          swap the served weights in place

and a config class (`rlcore.config.base.TransportConfig`) whose methods hold everything else the
transport decides: `rl`'s checks (`check_launch`) and derived settings (`derive`) from a
`Deployment`, its disk estimate (`num_policy_folders`), inference's extra vLLM arguments
(`vllm_argv`), and whether an older policy can be served again (`serves_older_policies`).

To add a transport: its config class in `rlcore/config/base.py` (a member of
`WeightTransferConfig`), and one implementation per side registered in the `TRANSPORTS` dict of
`trainer/weights.py`, `orchestrator/weights.py` and `inference/weights.py`. Nothing else changes.

Light module: pydantic and the standard library only.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

LOOPBACK = "127.0.0.1"


def listen_port_here(port: int | None) -> int | None:
    """A TCP port free on this machine's loopback: `port` when nothing listens on it (else
    None), the OS's pick when `port` is None. Reserved by this process from here on, as the
    inference ports are (rlcore.processes.ports), so that no other launcher takes it meanwhile."""
    import socket

    from rlcore.processes.ports import reserve

    for _ in range(10):
        with socket.socket() as sock:
            try:
                sock.bind((LOOPBACK, port or 0))
            except OSError:
                return None
            found = sock.getsockname()[1]
        if reserve(found):
            return found
        if port:
            return None  # given, and another launcher's run is about to listen on it
    return None


@dataclass(frozen=True)
class Deployment:
    """What `rl` is about to start, as a transport's launcher hooks see it."""

    num_servers: int
    """Inference servers (`inference.replicas`)."""
    workers_per_server: int
    """Inference worker processes per server (tp × dp on GPUs, 1 on CPU)."""
    inference_on_gpus: bool
    num_nodes: int
    """Machines the run spans (a SLURM job's nodes; 1 outside SLURM)."""
    lora: bool
    """The trainer trains LoRA adapters (`trainer.lora`)."""
    trainer_host: str | None = LOOPBACK
    """The address every process of the run reaches trainer rank 0 at: loopback on one
    machine, the first trainer node in a multi-node SLURM job; None while that node is not
    known (a multi-node job before `rl` runs inside it: then nothing is derived that depends
    on where the processes run)."""
    listen_port: Callable[[int | None], int | None] = listen_port_here
    """A TCP port free where trainer rank 0 runs (on the trainer's first node in a job): the
    port given when nothing listens on it there (else None), any free one for None."""


class WeightSender(ABC):
    """Trainer side. Every rank calls `publish`; the transport decides who writes."""

    @abstractmethod
    def publish(self, step: int) -> None:
        """Make the policy after `step` optimizer steps available to the other side."""

    def publish_initial(self, step: int) -> None:
        """Make the starting policy (the base model, or a resumed step's) available; a
        transport whose copy survived the restart may skip it."""
        self.publish(step)

    def prune(self, step: int) -> None:  # noqa: B027 - optional hook
        """Forget policies no batch still to come can be generated from (after `step`)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Finish whatever is in flight; called once at the end of training."""

    def metrics(self) -> dict[str, float]:
        """Timings of the last publish, logged with the step (seconds)."""
        return {}


class PolicyServers(Protocol):
    """The inference servers a swap goes to (the orchestrator's ServerPool)."""

    def __len__(self) -> int: ...

    async def update_weights(
        self, requests: list[dict[str, Any]], timeout_s: float | None = None
    ) -> dict[str, Any] | None:
        """POST /update_weights `requests[i]` to server i; the answer every server gave (None:
        they have no swap route), or an error naming the server that refused or differed.
        `timeout_s`: for each server's answer (None: the client's request timeout)."""
        ...


class WeightReceiver(ABC):
    """Orchestrator side: which policies exist, and how inference is told to load one."""

    eager: bool = False
    """Serve each new policy at the next batch boundary even when an older one would still do
    (a transport whose trainer waits until its policy is taken sets it)."""

    @abstractmethod
    async def wait(self, oldest: int, newest: int, timeout_s: float) -> int:
        """The newest ready policy step m with oldest <= m <= newest, waiting up to
        `timeout_s`; raises OrchestratorError naming what it waited for on timeout."""

    @abstractmethod
    def load_request(self, step: int) -> dict[str, Any]:
        """The JSON body of POST /update_weights that makes inference serve policy `step`."""

    async def swap(self, step: int, servers: PolicyServers) -> dict[str, Any] | None:
        """Make every server serve policy `step` (a ready one); returns once all serve it, so
        no batch mixes policies: the servers' common answer (its `model`, when set, is the
        name requests must use), None when they have no swap route."""
        request = self.load_request(step)
        return await servers.update_weights([request] * len(servers))

    def newest(self) -> int | None:
        """The newest policy ready now (for `eager` transports), without waiting."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """The orchestrator asks for no more policies (its end, also on an error)."""


class WeightLoader(ABC):
    """Inference side: swaps the engine's weights in place, one swap at a time."""

    @abstractmethod
    async def load(self, request: dict[str, Any]) -> dict[str, Any]:
        """Serve the policy `request` (a load_request body) names; returns a status dict with
        `weights` (what serves now) and `load_s`."""

    @abstractmethod
    async def reload_base(self) -> dict[str, Any]:
        """Serve the weights the server started with."""
