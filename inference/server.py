"""The inference process: vLLM's OpenAI-compatible app served from this process (the engine core
runs in child processes) plus the admin routes that swap policy weights in place.

Order: check the model and the port (user errors exit 2 before vLLM starts), set CPU defaults,
parse vLLM's arguments, write the resolved config, load the model, serve until SIGTERM/SIGINT,
then make sure no engine process outlives this one.
"""

import asyncio
import errno
import logging
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

from inference import batch_invariant, cpu_fork, cpu_matmul
from inference.admin import add_admin_routes, add_health_proof, issue_admin_token
from inference.config import InferenceConfig
from inference.patches import TORCH_SUPPORTED, require_version
from rlcore.config.entry import exit_with
from rlcore.config.toml_io import write_config
from rlcore.errors import ConfigError
from rlcore.host.machine import bf16_matmul_refusal, probe, serving_dtypes, slow_bf16_warning
from rlcore.processes import children, heap
from rlcore.processes.health import SERVER_NONCE_ENV, port_holder, port_problem
from rlcore.processes.poll import wait_until_async
from rlcore.processes.ports import DEFAULT_PORT, held_for_me, reservation_holder, reserve
from rlcore.reporting.logs import setup_logging
from rlcore.runs import waits
from rlcore.runs.rundir import RunDir
from rlcore.runs.runguard import INFERENCE, check_run, open_run

PROG = "inference"
CHILD_GRACE_S = 10.0
logger = logging.getLogger(PROG)
READY = threading.Event()
STOP_REQUESTED = threading.Event()
STOPPING = threading.Event()  # set before the children are listed to be stopped


def run(config: InferenceConfig) -> None:
    """Check, start, serve until a signal, stop; user errors exit 2 with one message."""
    start = time.monotonic()
    setup_logging(PROG, config.log.level, stream=sys.stderr)
    try:
        model_path = resolve_served_model(config.model.name)
        check_port(config)
        check_run(config.output_dir, INFERENCE)  # before vLLM's import: its kind, its holders
        os.environ.setdefault("VLLM_LOGGING_LEVEL", config.log.level.upper())
        on_cpu = setup_device_env(config)
        from inference.vllm_args import build_vllm_args

        args = build_vllm_args(config, model_path, on_cpu)
        write_resolved_config(config)
    except ConfigError as err:
        exit_with(str(err), PROG)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all")
    device = "cpu" if on_cpu else f"gpu (CUDA_VISIBLE_DEVICES={visible})"
    logger.info(
        f"starting vLLM: model {config.model.name} ({model_path}) on {device}, "
        f"http://{config.server.host}:{config.server.port}"
    )
    start_startup_watchdog(config.server.startup_timeout_s)
    code = 0
    try:
        import uvloop

        code = uvloop.run(serve(args, config, model_path, start))
    except KeyboardInterrupt:
        logger.info("interrupted")
    except ConfigError as err:
        stop_children()
        exit_with(str(err), PROG)
    finally:
        stop_children()
        logger.info("stopped")
    sys.exit(code)


def start_startup_watchdog(timeout_s: float) -> None:
    """Give up (exit 1, engine processes stopped) if not serving within `timeout_s`."""

    def watch() -> None:
        if not READY.wait(timeout_s):
            logger.info(f"not ready after {timeout_s:g} s (server.startup_timeout_s): giving up")
            stop_children()
            logger.info("stopped")
            os._exit(1)

    threading.Thread(target=watch, name="startup-watchdog", daemon=True).start()


def resolve_served_model(name: str) -> str:
    """Local folder for the bundled default or a path; a hub name must be cached or on the hub."""
    from rlcore.host.models import ModelNotFoundError, resolve_model

    try:
        resolved = resolve_model(name)
    except ModelNotFoundError as err:
        raise ConfigError(str(err)) from None
    if not Path(resolved).is_dir():
        check_hub_model(resolved)
    return resolved


def check_hub_model(name: str) -> None:
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return
    try:
        HfApi().model_info(name, timeout=10)
    except GatedRepoError:
        return  # exists; vLLM reports missing credentials itself
    except RepositoryNotFoundError:
        raise ConfigError(
            f"model.name = {name!r} is not on the Hugging Face hub (nor a local folder): "
            "check the spelling, or give an HF model folder"
        ) from None
    except Exception as err:
        raise ConfigError(
            f"model.name = {name!r} is not a local folder nor in the HF cache, and the hub is "
            f"unreachable ({type(err).__name__}): give a local HF folder, or use the bundled "
            "HuggingFaceTB/SmolLM2-135M-Instruct"
        ) from None


def check_port(config: InferenceConfig) -> None:
    """The port to serve on (unset: DEFAULT_PORT, the per-component workflow's) must be free
    and, unless this server's launcher reserved it for it, reserved by no starting run (then
    this process reserves it until it exits, so no launcher takes it while vLLM loads)."""
    host = config.server.host
    port = config.server.port = config.server.port or DEFAULT_PORT
    problem = port_problem(host, port)
    if problem is None and not held_for_me(port) and not reserve(port):
        holder = reservation_holder(port) or "a process that cannot be named from here"
        problem = f"reserved by another run's launcher, {holder}, whose server is starting"
    if problem is not None:
        raise ConfigError(
            f"server.port {port} on {host} is not available ({problem}): stop whatever uses it "
            "or pick another port with --server.port"
        )


def setup_device_env(config: InferenceConfig) -> bool:
    """True when serving on CPU; then set vLLM's CPU defaults unless the environment has them."""
    steer_vllm_kernels(probe())
    from vllm.platforms import current_platform

    on_cpu = current_platform.is_cpu()
    resolve_dtypes(config, on_cpu)
    if not on_cpu:
        if config.deterministic:  # vLLM's own batch-invariant kernels (CUDA, XPU)
            os.environ.setdefault("VLLM_BATCH_INVARIANT", "1")
        return False
    if config.deterministic:  # ours on CPU, in this process and every one vLLM starts
        os.environ[batch_invariant.BATCH_INVARIANT_ENV] = "1"
        os.environ[batch_invariant.SPLIT_KV_ENV] = "0"
        batch_invariant.install()
    if config.cpu.matmul_dtype == cpu_matmul.BF16:  # here and in every process vLLM starts
        os.environ[cpu_matmul.MATMUL_ENV] = cpu_matmul.BF16
    else:
        os.environ.pop(cpu_matmul.MATMUL_ENV, None)
    cpu_matmul.install()
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", config.cpu.omp_threads_bind)
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    if config.cpu.start_method == "fork":
        cpu_fork.start_by_fork(config.cpu.separate_worker)
    return True


def steer_vllm_kernels(machine) -> None:
    """vLLM picks its CPU kernel library (AVX2 or AVX-512) from the hardware alone; where the
    environment caps this process below AVX-512 (rlcore.host.machine: ATEN_CPU_CAPABILITY,
    ONEDNN_MAX_CPU_ISA), it loads the AVX2 one, as on an AVX2 machine. Before vLLM's import."""
    if machine.isa not in ("baseline", "avx2") or machine.hardware_isa == machine.isa:
        return
    require_version("torch", TORCH_SUPPORTED, "the ISA cap's choice of vLLM's kernels")
    import torch

    if "vllm._custom_ops" in sys.modules:
        logger.warning("vLLM's kernels were loaded before the ISA cap could steer them")
    torch.cpu._is_avx512_supported = lambda: False
    torch.cpu._is_avx512_bf16_supported = lambda: False


def resolve_dtypes(config: InferenceConfig, on_cpu: bool) -> None:
    """`auto` dtypes for this machine (rlcore.host.machine): served in bf16 on a GPU, in fp32 on a
    CPU, whose linear layers compute in bf16 where bf16 is native; under `rl` both come
    resolved. A bf16 the CPU cannot build is refused here, before vLLM starts."""
    machine = probe()
    model, cpu = config.model, config.cpu
    model.dtype, cpu.matmul_dtype = serving_dtypes(
        model.dtype, cpu.matmul_dtype, not on_cpu, machine
    )
    if not on_cpu:
        return
    if cpu.matmul_dtype == cpu_matmul.BF16:
        refusal = bf16_matmul_refusal("cpu.matmul_dtype", machine) or cpu_matmul.check_bf16()
        if refusal:
            raise ConfigError(refusal)
    if warning := slow_bf16_warning("model.dtype", model.dtype, machine):
        logger.warning(warning)
    logger.info(
        f"dtypes: served {model.dtype}, linear layers in {cpu.matmul_dtype} ({machine.describe()})"
    )


def write_resolved_config(config: InferenceConfig) -> None:
    """The first write into the run folder, so claim it first: a ConfigError when it is not an
    rl run, or new or empty, or another process holds it (rlcore.runs.runguard)."""
    run_dir = RunDir(config.output_dir)
    open_run(run_dir.root, INFERENCE)
    name = waits.component_name(PROG)  # a replica's own name: each writes its own config
    write_config(config, run_dir.config_file(name))
    waits.setup(run_dir.root, name)  # what it waits for, for rl to read


def port_lost(host: str, port: int | None) -> str:
    """Why the server cannot listen: `port` was free when checked and taken before the bind."""
    holder = port_holder(port) if port else None
    return (
        f"port {port} on {host} was taken before this server could listen on it "
        f"({f'by {holder}' if holder else 'by another program'}): free it, or pick another "
        "port with --server.port (under rl: --inference.server.port; left unset, rl takes a "
        "free one from 8000 up)"
    )


async def serve(args, config: InferenceConfig, model_path: str, start: float) -> int:
    """Load the engine, serve HTTP until a signal, shut the engine down; returns the exit
    code: 0 after a signal, 1 when the engine died under the server."""
    from vllm.entrypoints.launchers.api_server.entry import build_async_engine_client
    from vllm.entrypoints.launchers.launcher import setup_server

    # Until uvicorn installs its own handlers, a signal stops everything at once: vLLM's
    # startup swallows KeyboardInterrupt in places (zmq_socket_ctx) and would go on loading.
    signal.signal(signal.SIGTERM, stop_during_startup)
    signal.signal(signal.SIGINT, stop_during_startup)
    try:
        _, sock = setup_server(args, reuse_port=False)
    except OSError as err:  # taken between the launcher's check and this bind
        if err.errno != errno.EADDRINUSE:
            raise
        raise ConfigError(port_lost(config.server.host, config.server.port)) from None
    logging.getLogger("vllm.v1.engine.async_llm").addFilter(quiet_requested_stop)
    if cpu_fork.ACTIVE:  # vLLM's CPU processes are forked from here
        cpu_fork.child_forgets(sock, STOPPING)
    try:
        async with build_async_engine_client(args) as engine:
            shutdown_task = await serve_app(engine, sock, args, config, model_path, start)
            died = not STOP_REQUESTED.is_set()
            if died:
                logger.info(
                    f"stopped serving unasked (engine dead: {engine.errored}); shutting down"
                )
        await shutdown_task
    finally:
        sock.close()
    return 1 if died else 0


async def serve_app(engine, sock, args, config: InferenceConfig, model_path: str, start: float):
    """vLLM's `build_and_serve` plus our admin routes and a readiness message."""
    from vllm import envs
    from vllm.entrypoints.launchers.api_server.app_state import init_app_state
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.launcher import serve_http

    from inference.generate_compat import add_generate_compat
    from inference.lora import build_adapter_swapper
    from inference.weights import build_loader

    supported_tasks = await engine.get_supported_tasks()
    app = build_app(args, supported_tasks, engine.model_config)
    add_generate_compat(app)
    adapters = build_adapter_swapper(config, engine, app.state)
    loader = build_loader(
        config.weight_transfer, engine, model_path, config.output_dir, config.weights, adapters
    )
    add_admin_routes(app, loader, issue_admin_token(config))
    add_health_proof(app, os.environ.get(SERVER_NONCE_ENV))
    await init_app_state(engine, app.state, args, supported_tasks)
    asyncio.get_running_loop().create_task(announce_ready(app, engine, config, start))
    return await serve_http(
        app,
        sock=sock,
        host=args.host,
        port=args.port,
        log_level=args.uvicorn_log_level,
        access_log=not args.disable_uvicorn_access_log,
        timeout_keep_alive=envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE,
        h11_max_incomplete_event_size=args.h11_max_incomplete_event_size,
        h11_max_header_count=args.h11_max_header_count,
    )


async def announce_ready(app, engine, config: InferenceConfig, start: float) -> None:
    """Once uvicorn serves: say so, and take over SIGTERM/SIGINT from vLLM's handlers so that
    a requested stop (exit 0) can be told apart from an engine that died (exit 1)."""

    def started() -> bool:
        return getattr(getattr(app.state, "server", None), "started", False)

    await wait_until_async(started, math.inf, 0.1, "uvicorn to serve")
    READY.set()
    from vllm.platforms import current_platform

    if current_platform.is_cpu():  # what loading left resident (rlcore/processes/heap.py)
        heap.trim()
        heap.page_out_libraries()
    url = f"http://{config.server.host}:{config.server.port}"
    logger.info(f"ready: serving {config.model.name} at {url} ({time.monotonic() - start:.1f} s)")
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, request_stop, signum, app, engine)


def request_stop(signum: int, app, engine) -> None:
    """vLLM's own order: stop the engine (aborting requests in flight), then the HTTP server."""
    if STOP_REQUESTED.is_set():
        return
    STOP_REQUESTED.set()
    logger.info(f"{signal.Signals(signum).name}: shutting down")

    async def stop() -> None:
        timeout = engine.vllm_config.shutdown_timeout
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: engine.shutdown(timeout=timeout)
        )
        app.state.server.should_exit = True

    asyncio.get_running_loop().create_task(stop())


def quiet_requested_stop(record: logging.LogRecord) -> bool:
    """Drop vLLM's "output_handler failed" error (an EngineDeadError traceback) once this
    server has asked the engine to stop: the engine core exits because it was told to."""
    return not (STOP_REQUESTED.is_set() and "output_handler failed" in record.getMessage())


def stop_during_startup(signum: int, _frame) -> None:
    logger.info(f"{signal.Signals(signum).name} during startup: stopping the engine processes")
    stop_children()
    logger.info("stopped")
    os._exit(128 + signum)


def stop_children() -> None:
    """Terminate every process this one started (engine core, workers), then kill what is left
    after CHILD_GRACE_S (rlcore.processes.children.stop_descendants: an engine core may still be
    spawning workers; multiprocessing's resource tracker is left to exit by itself)."""
    STOPPING.set()  # a process forked from now on exits by itself (cpu_fork.child_forgets)
    children.stop_descendants(CHILD_GRACE_S, say=logger.info)
