"""Turning a validated RLConfig into a launch plan: GPU map, derived settings, commands."""

import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from launcher.rl_config import COMPONENTS, RLConfig
from rlcore.errors import ConfigError
from rlcore.health import server_url
from rlcore.rundir import RunDir


def detect_gpus() -> list[int]:
    """Physical GPU ids visible on this machine, without importing torch."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return (
        [int(x) for x in out.stdout.split() if x.strip().isdigit()] if out.returncode == 0 else []
    )


@dataclass
class Plan:
    """What `rl` will start: one entry per component, in start order."""

    config: RLConfig
    gpu_map: dict[str, list[int]]
    warnings: list[str] = field(default_factory=list)
    memory: str = ""
    """The trainer's estimated peak memory against what it has (launcher.memory)."""

    @property
    def run(self) -> RunDir:
        return RunDir(self.config.trainer.output_dir)

    def env(self, component: str) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in self.gpu_map[component])}

    def command(self, component: str) -> list[str]:
        config_file = self.run.config_file(component)
        return [sys.executable, "-m", f"{component}.main", "@", str(config_file)]


def assign_gpus(config: RLConfig, available: list[int], dry_run: bool) -> tuple[dict, list[str]]:
    """Pick each process's GPU set; the orchestrator never gets one."""
    warnings: list[str] = []
    inf, trn = config.inference_gpu_ids, config.trainer_gpu_ids
    if inf is None and trn is None:
        if len(available) >= 2:
            inf, trn = [available[0]], [available[1]]
        elif len(available) == 1:
            raise ConfigError(
                "one GPU found but inference and trainer need one each: pass "
                "--inference-gpu-ids and --trainer-gpu-ids explicitly (they must be disjoint)"
            )
        else:
            inf, trn = [], []
    else:
        inf = inf if inf is not None else [g for g in available if g not in (trn or [])][:1]
        trn = trn if trn is not None else [g for g in available if g not in inf][:1]
    missing = sorted(set(inf + trn) - set(available))
    if missing:
        message = (
            f"GPU id(s) {missing} not present on this machine (found: {available or 'none'}); "
            "fix --inference-gpu-ids / --trainer-gpu-ids"
        )
        if not dry_run:
            raise ConfigError(message)
        warnings.append(message + " (dry run: continuing)")
    return {"inference": inf, "orchestrator": [], "trainer": trn}, warnings


def derive(config: RLConfig) -> RLConfig:
    """Fill settings one component derives from another (base URL, the dtype published
    weights are written in, data parallelism)."""
    server = config.inference.server
    url = server_url(server.host, server.port) + "/v1"
    client = config.orchestrator.client
    if client.base_url is None:
        client.base_url = url
    elif client.base_url.rstrip("/") != url:
        raise ConfigError(
            f"orchestrator.client.base_url = {client.base_url!r} but inference serves at {url}: "
            "leave base_url unset under `rl` (it is derived) or match inference.server.port"
        )
    trainer_model = config.trainer.model
    if trainer_model.serving_dtype is None and config.inference.model.dtype != "auto":
        trainer_model.serving_dtype = config.inference.model.dtype  # publish what inference serves
    derive_lora(config)
    gpus = config.inference_gpu_ids
    if gpus and config.inference.parallel.dp is None:
        config.inference.parallel.dp = len(gpus) // config.inference.parallel.tp
    return config


def derive_lora(config: RLConfig) -> None:
    """A LoRA trainer needs an inference server that serves adapters of its rank: fill
    `inference.lora` when unset (the smallest rank vLLM takes that fits), refuse one too small."""
    from inference.config import LORA_RANKS, LoraServeConfig

    lora, serving = config.trainer.lora, config.inference.lora
    if lora is None:
        return
    ranks = [r for r in LORA_RANKS if r >= lora.rank]
    if not ranks:
        raise ConfigError(
            f"trainer.lora.rank = {lora.rank}: vLLM serves adapters up to rank "
            f"{max(LORA_RANKS)}; lower trainer.lora.rank"
        )
    if serving is None:
        config.inference.lora = LoraServeConfig(max_rank=ranks[0])
    elif serving.max_rank < lora.rank:
        raise ConfigError(
            f"trainer.lora.rank = {lora.rank} but inference.lora.max_rank = {serving.max_rank}: "
            f"set inference.lora.max_rank to {ranks[0]} or more, or leave it unset"
        )


def make_plan(config: RLConfig, dry_run: bool) -> Plan:
    config = derive(config)
    gpu_map, warnings = assign_gpus(config, detect_gpus(), dry_run)
    if gpu_map["inference"] and not config.inference_gpu_ids:
        config.inference_gpu_ids = gpu_map["inference"]
    if gpu_map["trainer"] and not config.trainer_gpu_ids:
        config.trainer_gpu_ids = gpu_map["trainer"]
    from launcher.memory import check_memory

    memory, warning = check_memory(config, gpu_map)
    if warning is not None:
        warnings.append(warning)
    return Plan(config=config, gpu_map=gpu_map, warnings=warnings, memory=memory)


def describe(plan: Plan) -> str:
    """The GPU map and commands, as `--dry-run` and the start banner show them."""
    lines = ["GPU map:"]
    for component in COMPONENTS:
        gpus = plan.gpu_map[component]
        lines.append(f"  {component:<13} {'GPUs ' + ','.join(map(str, gpus)) if gpus else 'CPU'}")
    if plan.memory:
        lines.append(plan.memory)
    lines.append("Commands (started in this order: inference, then orchestrator and trainer):")
    for component in ("inference", "orchestrator", "trainer"):
        env = plan.env(component)
        cmd = " ".join(plan.command(component))
        lines.append(f"  CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']!r} {cmd}")
    return "\n".join(lines)
