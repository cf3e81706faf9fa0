"""The vLLM server arguments for an InferenceConfig: the keys this config owns plus the user's
`vllm_args`, each checked against vLLM's own argument parser (typos are errors with a
did-you-mean). Imports vLLM's argument parser, so call it only after the config has parsed."""

import argparse
import contextlib
import difflib
import io
import json
import os
from typing import Any

from inference.config import InferenceConfig
from inference.kv_check import check_cpu_kv_cache
from inference.worker_extension import WORKER_EXTENSION
from rlcore.errors import ConfigError
from rlcore.secrets import resolve, scrub


def vllm_parser() -> argparse.ArgumentParser:
    """vLLM's OpenAI server parser (`vllm serve` minus the subcommand)."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser(prog="vllm"))


def owned_argv(config: InferenceConfig, model_path: str, on_cpu: bool) -> list[str]:
    """Arguments derived from this project's config keys (the user's vllm_args come after)."""
    argv = [
        "--model",
        model_path,
        "--served-model-name",
        config.model.name,
        "--dtype",
        config.model.dtype,
        "--host",
        config.server.host,
        "--port",
        str(config.server.port),
        "--tensor-parallel-size",
        str(config.parallel.tp),
        "--seed",
        str(config.seed),
        "--disable-uvicorn-access-log",
        "--uvicorn-log-level",
        config.log.level,
        # Logprobs after temperature scaling: what the trainer recomputes from logits / T, so
        # the importance ratio is 1 on-policy at any temperature (vllm_args may override it).
        "--logprobs-mode",
        "processed_logprobs",
        # Sampling defaults come from each request only, never from the model folder's
        # generation_config.json (hub models set top_k, top_p...): the trainer could not
        # reproduce them.
        "--generation-config",
        "vllm",
        # Token-in/token-out /inference/v1/generate, which verifiers v1 tasksets sample from
        # (their client reads each logprob's token as `token_id:<id>`).
        "--enable-scale-out",
        "--return-tokens-as-token-ids",
        # reload_weights_retied: in-place reloads that keep tied weights right (CPU prepacks)
        "--worker-extension-cls",
        WORKER_EXTENSION,
    ]
    if config.model.trust_remote_code:
        argv.append("--trust-remote-code")
    if config.model.max_model_len is not None:
        argv += ["--max-model-len", str(config.model.max_model_len)]
    if config.parallel.dp is not None:
        argv += ["--data-parallel-size", str(config.parallel.dp)]
    if config.lora is not None:
        lora = config.lora
        argv += ["--enable-lora", "--max-lora-rank", str(lora.max_rank)]
        argv += ["--max-loras", str(lora.max_loras)]
    if on_cpu and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):  # the variable wins if set
        argv += ["--kv-cache-memory-bytes", str(int(config.cpu.kvcache_space_gib * 2**30))]
    eager = on_cpu if config.enforce_eager is None else config.enforce_eager
    argv.append("--enforce-eager" if eager else "--no-enforce-eager")
    return argv + config.weight_transfer.vllm_argv(on_cpu)  # what the transport adds


def option_for(key: str, parser: argparse.ArgumentParser) -> argparse.Action:
    """The parser action for a vllm_args key (snake or kebab case), or a did-you-mean error."""
    flag = "--" + key.replace("_", "-")
    actions = parser._option_string_actions  # noqa: SLF001 - argparse has no public lookup
    if flag in actions:
        return actions[flag]
    names = sorted({a.lstrip("-").replace("-", "_") for a in actions if a.startswith("--")})
    close = difflib.get_close_matches(key.replace("-", "_"), names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(
        f"vllm_args.{key} is not a vLLM engine or server argument{hint} "
        "(see `python -m vllm.entrypoints.openai.api_server --help`)"
    )


def value_argv(flag: str, value: Any, action: argparse.Action) -> list[str]:
    """TOML value -> argv words for one option."""
    is_switch = action.nargs == 0
    if isinstance(value, bool):
        if is_switch:
            negative = "--no-" + flag[2:]
            if value:
                return [flag]
            return [negative] if negative in action.option_strings else []
        return [flag, "true" if value else "false"]
    if value is None:
        return []
    if isinstance(value, dict):
        return [flag, json.dumps(value)]
    if isinstance(value, list):
        if action.nargs in ("+", "*"):
            return [flag, *(str(v) for v in value)]
        return [flag, json.dumps(value)]
    return [flag, str(value)]


def user_argv(vllm_args: dict[str, Any], parser: argparse.ArgumentParser) -> list[str]:
    argv: list[str] = []
    for key, value in vllm_args.items():
        action = option_for(key, parser)
        argv += value_argv("--" + key.replace("_", "-"), value, action)
    return argv


def build_vllm_args(config: InferenceConfig, model_path: str, on_cpu: bool) -> argparse.Namespace:
    """Parse owned + user arguments with vLLM's parser; a rejected value is a ConfigError."""
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

    parser = vllm_parser()
    vllm_args = resolve(config.vllm_args, "vllm_args")  # $VAR secrets, in this process only
    api_key = vllm_args.pop("api_key", None) or vllm_args.pop("api-key", None)
    if api_key:  # vLLM reads it from there; it never appears in argv or vLLM's own logs
        os.environ["VLLM_API_KEY"] = str(api_key)
    extra = user_argv(vllm_args, parser)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(owned_argv(config, model_path, on_cpu) + extra)
        validate_parsed_serve_args(args)
    except SystemExit:
        lines = stderr.getvalue().strip().splitlines()
        reason = lines[-1].removeprefix(f"{parser.prog}: error: ") if lines else "invalid value"
        raise ConfigError(scrub(rejected(extra, reason), vllm_args)) from None
    except (TypeError, ValueError) as err:
        raise ConfigError(scrub(rejected(extra, str(err)), vllm_args)) from None
    if on_cpu:
        check_cpu_kv_cache(args, model_path)
    return args


def rejected(extra: list[str], reason: str) -> str:
    given = f" (vllm_args as flags: {' '.join(extra)})" if extra else ""
    return f"vLLM rejected the server arguments: {reason}{given}; fix vllm_args in the config"
