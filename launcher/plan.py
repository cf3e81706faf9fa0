"""The launch plan: what runs where. Pure data built from a validated RLConfig and the GPUs
found (GPU map, derived settings, commands); the memory check, pre-flight, the SLURM placement
and launch.py read it, and it imports none of them (launcher/prepare.py builds it)."""

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from launcher.rl_config import RLConfig
from rlcore.config.weight_transfer import LOOPBACK, Deployment, listen_port_here
from rlcore.errors import ConfigError
from rlcore.forecast.model import Forecast
from rlcore.host.machine import (
    Machine,
    bf16_matmul_refusal,
    compute_dtype,
    probe,
    serving_dtypes,
    slow_bf16_warning,
)
from rlcore.processes.health import SERVER_NONCE_ENV, server_url
from rlcore.processes.ports import HELD_ENV
from rlcore.runs.admin_token import ADMIN_TOKEN_ENV, new_token
from rlcore.runs.attempt import ATTEMPT_ENV
from rlcore.runs.rundir import RunDir
from rlcore.runs.runguard import LAUNCHER_ENV
from rlcore.runs.waits import COMPONENT_ENV, server_name
from trainer.speed_policy import SpeedChoices


@dataclass
class Plan:
    """What `rl` will start: one entry per component, in start order."""

    config: RLConfig
    gpu_map: dict[str, list[int]]
    warnings: list[str] = field(default_factory=list)
    memory: str = ""
    """The trainer's estimated peak memory against what it has (launcher.memory)."""
    forecast: Forecast | None = None
    """The run's estimate (launcher.forecast): recorded in run.json, the time left from it."""
    estimate: list[str] = field(default_factory=list)
    """The estimate block's lines, or one line saying why there is none."""
    disk_need: float | None = None
    """Bytes the run folder may hold at its fullest (launcher.prepare.disk_need), which the start
    checks against the free space; None when the model's shape is unknown."""
    numeric_choices: dict[str, str] = field(default_factory=dict)
    """What makes this run's numbers (`numeric_choices`, set as the dtypes are chosen): run.json
    keeps it, and a resume on a machine that chooses otherwise is told so."""

    @property
    def run(self) -> RunDir:
        return RunDir(self.config.trainer.output_dir)

    placement: dict[str, list[str]] = field(default_factory=dict)
    """Inside a SLURM job: the nodes each component is started on with srun (launcher.slurm)."""
    wrappers: dict[str, list[str]] = field(default_factory=dict)
    """Inside a SLURM job: what each placed component's command is started through (srun)."""
    urls: dict[str, str] = field(default_factory=dict)
    """Inside a multi-node job: each inference server's address on its node."""
    extra_env: dict[str, dict[str, str]] = field(default_factory=dict)
    secret_env: dict[str, str] = field(default_factory=dict)
    """Literal secrets of the config, by the `$RL_SECRET_...` names the written configs use
    (rlcore.secrets); every process gets them in its environment."""
    attempt: str = ""
    """The current attempt's id (rlcore.runs.attempt), new for every start and restart; every
    process gets it in RL_ATTEMPT_ID and stamps what it writes for the others with it."""
    machine: Machine | None = None
    """What this machine is (rlcore.host.machine), as the auto dtypes were chosen for it."""
    dtypes: list[str] = field(default_factory=list)
    """The dtypes and the trainer's speed choices made and why, as the start banner and
    `--dry-run` say them."""
    speed: SpeedChoices | None = None
    """The trainer's speed choices (launcher.speed), recorded in run.json."""
    admin_token: str | None = None
    """One admin token for all inference servers of the run (RL_ADMIN_TOKEN in their
    environment only), so that the orchestrator's one `admin_token` file fits them all."""
    machine_chosen: dict[str, object] = field(default_factory=dict)
    """Settings `rl` chose on this machine because the user left them unset (the inference
    port, and the base URL derived from it), by their dotted key with the value given (None):
    `configs/rl.toml` and a dry run's config keep them so, and a resume chooses again."""
    ports_note: str = ""
    """Which ports the inference servers listen on and why, as the banner and `--dry-run` say."""
    server_nonce: str = ""
    """The current attempt's inference nonce (rlcore.processes.health), new for every start and
    restart: the servers prove it on /health, and `rl` and the orchestrator accept no server that
    cannot; in the servers' and the orchestrator's environment only."""

    @property
    def inference_names(self) -> list[str]:
        return inference_names(self.config.inference.replicas)

    @property
    def components(self) -> list[str]:
        """Every process, in start order."""
        return [*self.inference_names, "orchestrator", "trainer"]

    def env(self, component: str) -> dict[str, str]:
        env = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in self.gpu_map[component])}
        env[LAUNCHER_ENV] = str(os.getpid())  # this launcher holds the run's lock for them
        env[ATTEMPT_ENV] = self.attempt
        env[COMPONENT_ENV] = component  # the name its recorded waits go under (rlcore.runs.waits)
        env.update(self.secret_env)
        if self.admin_token and component.startswith("inference"):
            env[ADMIN_TOKEN_ENV] = self.admin_token
        reserved = self.config.inference.server.port and not self.urls  # not on other nodes
        if component.startswith("inference") and reserved:  # this launcher holds its port
            env[HELD_ENV] = str(replica_config(self.config, component).server.port)
        if self.server_nonce and (component.startswith("inference") or component == "orchestrator"):
            env[SERVER_NONCE_ENV] = self.server_nonce
        return env

    def url(self, server: str) -> str:
        """Where inference server `server` listens: its address on its node inside a multi-node
        job, else its host and port."""
        if server in self.urls:
            return self.urls[server]
        config = replica_config(self.config, server).server
        return server_url(config.host, config.port)

    def port(self, server: str) -> int:
        """The port inference server `server` listens on (chosen free or given:
        launcher.prepare)."""
        return replica_config(self.config, server).server.port

    def command(self, component: str) -> list[str]:
        config_file = self.run.config_file(component)
        module = "inference" if component.startswith("inference") else component
        command = [sys.executable, "-m", f"{module}.main", "@", str(config_file.absolute())]
        return [*self.wrappers.get(component, []), *command]


def assign_gpus(config: RLConfig, available: list[int], dry_run: bool) -> tuple[dict, list[str]]:
    """Pick each process's GPU set; the orchestrator never gets one."""
    warnings: list[str] = []
    inf, trn = config.inference_gpu_ids, config.trainer_gpu_ids
    replicas = config.inference.replicas
    if inf is None and trn is None:
        if len(available) >= replicas + 1:
            inf, trn = available[:replicas], [available[replicas]]
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
        if trn and not inf:
            message = (
                f"--trainer-gpu-ids {trn} leaves no GPU for inference (found: "
                f"{available or 'none'}): pass --inference-gpu-ids with GPUs of its own"
            )
            if not dry_run:
                raise ConfigError(message)
            warnings.append(message + " (dry run: continuing)")
    missing = sorted(set(inf + trn) - set(available))
    if missing:
        message = (
            f"GPU id(s) {missing} not present on this machine (found: {available or 'none'}); "
            f"fix {'--gpus' if config.gpus else '--inference-gpu-ids / --trainer-gpu-ids'}"
        )
        if not dry_run:
            raise ConfigError(message)
        warnings.append(message + " (dry run: continuing)")
    gpu_map = {"orchestrator": [], "trainer": trn}
    if inf and len(inf) % replicas:
        raise ConfigError(
            f"inference.replicas = {replicas} cannot split --inference-gpu-ids {inf} evenly: "
            f"list a multiple of {replicas} GPUs"
        )
    share = len(inf) // replicas
    for i, name in enumerate(inference_names(replicas)):
        gpu_map[name] = inf[i * share : (i + 1) * share]
    return gpu_map, warnings


def inference_names(replicas: int) -> list[str]:
    """The inference processes' names: `inference`, then `inference-1`, `inference-2`, ..."""
    return [server_name(i) for i in range(replicas)]


def replica_config(config: RLConfig, name: str):
    """The InferenceConfig of server `name`: its own port (the first server's + its index)."""
    index = inference_names(config.inference.replicas).index(name)
    replica = config.inference.model_copy(deep=True)
    port = replica.server.port
    assert port is not None, "the first server's port is settled first (prepare.settle_ports)"
    replica.server.port = port + index
    return replica


def derive(config: RLConfig) -> RLConfig:
    """Fill settings one component derives from another (base URL, the dtype published
    weights are written in, data parallelism)."""
    derive_base_url(config)
    derive_max_model_len(config)
    # The orchestrator starts with inference and waits for /health itself: as long as rl would.
    startup_s = config.inference.server.startup_timeout_s
    client = config.orchestrator.client
    client.health_timeout_s = max(client.health_timeout_s, startup_s)
    derive_lora(config)
    gpus = config.inference_gpu_ids
    if gpus and config.inference.parallel.dp is None:
        config.inference.parallel.dp = len(gpus) // (
            config.inference.parallel.tp * config.inference.replicas
        )
    return config


def derive_base_url(config: RLConfig) -> None:
    """The orchestrator's base URLs are the servers' (one per replica), checked when given.
    Nothing while the port is unset: a SLURM job chooses it on its node."""
    server, client = config.inference.server, config.orchestrator.client
    if server.port is None:
        return
    urls = [
        server_url(server.host, server.port + i) + "/v1" for i in range(config.inference.replicas)
    ]
    if client.base_url is None:
        client.base_url = urls[0] if len(urls) == 1 else urls
    elif [u.rstrip("/") for u in client.base_urls] != urls:
        raise ConfigError(
            f"orchestrator.client.base_url = {client.base_url!r} but inference serves at "
            f"{', '.join(urls)}: leave base_url unset under `rl` (it is derived) or match "
            "inference.server.port"
        )


def derive_dtypes(
    config: RLConfig, gpu_map: dict[str, list[int]], machine: Machine
) -> tuple[list[str], list[str]]:
    """`auto` dtypes for this machine (rlcore.host.machine), so every process gets the same concrete
    ones: the trainer's compute dtype, inference's served dtype (fp32 on CPU, so the trainer's
    master weights arrive whole), the dtype published weights are written in (what inference
    serves) and, on CPU, inference's linear layers (bf16 products where the trainer computes
    in bf16 and oneDNN has them). Returns why each was chosen, and the warnings."""
    trainer, inference = config.trainer.model, config.inference.model
    on_cpu = not gpu_map.get("inference")
    trainer.dtype, why_trainer = compute_dtype(trainer.dtype, bool(gpu_map["trainer"]), machine)
    cpu = config.inference.cpu
    inference.dtype, cpu.matmul_dtype = serving_dtypes(
        inference.dtype, cpu.matmul_dtype, not on_cpu, machine, trainer.dtype
    )
    if trainer.serving_dtype is None:
        trainer.serving_dtype = inference.dtype  # publish what inference serves
    notes = [
        f"trainer.model.dtype = {trainer.dtype} ({why_trainer})",
        f"inference.model.dtype = {inference.dtype}"
        + (f", cpu.matmul_dtype = {cpu.matmul_dtype}" if on_cpu else ""),
    ]
    if on_cpu and cpu.matmul_dtype == "bfloat16":
        refusal = bf16_matmul_refusal("inference.cpu.matmul_dtype", machine)
        if refusal:
            raise ConfigError(refusal)
    warnings = [
        slow_bf16_warning("trainer.model.dtype", trainer.dtype, machine)
        if not gpu_map["trainer"]
        else None,
        slow_bf16_warning("inference.model.dtype", inference.dtype, machine) if on_cpu else None,
    ]
    return notes, [w for w in warnings if w]


def derive_transport(
    config: RLConfig,
    gpu_map: dict[str, list[int]],
    trainer_host: str | None,
    listen_port: Callable[[int | None], int | None] = listen_port_here,
) -> None:
    """The weight transport's own checks and derived settings for this deployment
    (rlcore.config.base.TransportConfig), then the same transport in all three processes. A
    multi-node job is derived once placed on its nodes (launcher.slurm.place_in_job gives
    `trainer_host` and `listen_port` there); before, only checked."""
    transfer = config.trainer.weight_transfer
    parallel = config.inference.parallel
    on_gpus = bool(gpu_map.get("inference"))
    num_nodes = (config.slurm.nodes or 1) if config.slurm is not None else 1
    deployment = Deployment(
        num_servers=config.inference.replicas,
        workers_per_server=parallel.tp * (parallel.dp or 1) if on_gpus else 1,
        inference_on_gpus=on_gpus,
        num_nodes=num_nodes,
        lora=config.trainer.lora is not None,
        trainer_host=trainer_host,
        listen_port=listen_port,
    )
    transfer.check_launch(deployment)
    transfer.derive(deployment)
    for component in (config.orchestrator, config.inference):
        component.weight_transfer = transfer.model_copy()


def derive_max_model_len(config: RLConfig) -> None:
    """Inference must take whole samples: `max_model_len` is `seq_len` unless set, and never
    smaller."""
    model, seq_len = config.inference.model, config.orchestrator.seq_len
    if model.max_model_len is None:
        model.max_model_len = seq_len
    elif model.max_model_len < seq_len:
        raise ConfigError(
            f"inference.model.max_model_len = {model.max_model_len} is below seq_len = "
            f"{seq_len}: no sample could be longer than {model.max_model_len} tokens; raise "
            f"inference.model.max_model_len to {seq_len} or more, leave it unset, or lower "
            "--seq-len"
        )


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


def make_plan(config: RLConfig, available: list[int], dry_run: bool, submitting: bool) -> Plan:
    """The plan for `config` on a machine with GPUs `available` (`submitting`: a SLURM job's
    GPUs are on its nodes, so missing ids only warn, as in a dry run)."""
    config = derive(config)
    gpu_map, warnings = assign_gpus(config, available, dry_run or submitting)
    machine, dtypes = probe(), list[str]()
    if not submitting:  # a job's machine resolves them there (rl runs again on its node)
        dtypes, slow = derive_dtypes(config, gpu_map, machine)
        warnings += slow
    multi_node = config.slurm is not None and (config.slurm.nodes or 1) > 1
    derive_transport(config, gpu_map, None if multi_node else LOOPBACK)
    names = inference_names(config.inference.replicas)
    all_inference = [g for name in names for g in gpu_map[name]]
    if all_inference and not config.inference_gpu_ids:
        config.inference_gpu_ids = all_inference
    if gpu_map["trainer"] and not config.trainer_gpu_ids:
        config.trainer_gpu_ids = gpu_map["trainer"]
    plan = Plan(config, gpu_map, warnings, admin_token=new_token(), machine=machine, dtypes=dtypes)
    plan.numeric_choices = numeric_choices(config, machine)
    return plan


def as_given(plan: Plan) -> dict:
    """The resolved config as `configs/rl.toml` and a dry run show it: what `rl` chose on this
    machine because it was unset (Plan.machine_chosen) back to unset, so `rl @` the file
    chooses again where it runs (a resume, a SLURM job's node) instead of insisting on it."""
    data = plan.config.model_dump(mode="json")
    for key, value in plan.machine_chosen.items():
        *path, last = key.split(".")
        node = data
        for part in path:
            node = node[part]
        node[last] = value
    return data


def numeric_choices(config: RLConfig, machine: Machine | None) -> dict[str, str]:
    """What makes a run's numbers: the ISA its kernels run with and the dtypes chosen."""
    return {
        "isa": machine.isa if machine else "",
        "trainer.model.dtype": config.trainer.model.dtype,
        "inference.model.dtype": config.inference.model.dtype,
        "inference.cpu.matmul_dtype": config.inference.cpu.matmul_dtype,
    }


def run_record(plan: Plan) -> dict:
    """What run.json keeps of the plan beside every state: the GPU map, where the inference
    servers listen, the machine, and the numeric and speed choices made for it."""
    servers = plan.inference_names
    return {
        "gpu_map": plan.gpu_map,
        "inference_url": plan.url("inference"),
        "inference_urls": [plan.url(n) for n in servers],
        "inference_ports": {n: plan.port(n) for n in servers},
        "machine": plan.machine.record() if plan.machine else None,
        "numeric_choices": plan.numeric_choices,
        "speed_choices": plan.speed.record() if plan.speed else None,
    }


def describe(plan: Plan) -> str:
    """The GPU map and commands, as `--dry-run` and the start banner show them."""
    lines = [f"Machine: {plan.machine.describe()}"] if plan.machine else []
    lines += [f"  {note}" for note in plan.dtypes]
    if plan.ports_note:
        lines.append(plan.ports_note)
    lines.append("GPU map:")
    for component in ("trainer", "orchestrator", *plan.inference_names):
        gpus = plan.gpu_map[component]
        lines.append(f"  {component:<13} {'GPUs ' + ','.join(map(str, gpus)) if gpus else 'CPU'}")
    if plan.memory:
        lines.append(plan.memory)
    lines += plan.estimate
    lines.append("Commands (started together; the orchestrator waits for inference):")
    for component in plan.components:
        env = plan.env(component)
        cmd = " ".join(plan.command(component))
        lines.append(f"  CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']!r} {cmd}")
    return "\n".join(lines)
