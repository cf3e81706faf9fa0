"""verifiers v1 tasksets (`[[env]] type = "v1"`): a `Taskset` package (the `id`, e.g.
`rl-add-digits-v1`) played by a v1 harness (default `null`, the plain chat loop) in the local
subprocess runtime. The harness's program talks to verifiers' interception server, which samples
from inference's token-in/token-out `/inference/v1/generate` route, so every turn comes back with
its token ids and logprobs; each trace branch becomes the `Turn`s of one `Rollout`.

`args` are the taskset's config fields, except `harness` (a harness id), `max_turns` and
`runtime` (an agent runtime table; default `{ type = "subprocess" }`).
"""

import asyncio
import contextlib
import importlib
import importlib.util
import logging
import sys
import types
from collections.abc import Sequence
from typing import Any

from orchestrator.envs.base import EnvAdapter, Rollout, Turn, seeded
from orchestrator.evals.summary import jsonable
from rlcore.errors import ConfigError
from rlcore.host.environments import module_name
from rlcore.secrets import redact, scrub

logger = logging.getLogger("orchestrator")

AGENT_KEYS = ("harness", "max_turns", "runtime")
MAX_TASKS = 100_000
"""An infinite taskset is read up to this many tasks."""


def is_v1_module(env_id: str) -> bool:
    """Whether the installed module `env_id` names exports a v1 Taskset and no classic
    `load_environment` (so `type = "verifiers"` can load it as v1)."""
    try:
        module = importlib.import_module(module_name(env_id))
    except Exception:  # noqa: BLE001 - the classic loader reports why it does not import
        return False
    if hasattr(module, "load_environment") or not hasattr(module, "__all__"):
        return False
    alias_fastmcp()
    from verifiers.v1.taskset import Taskset

    exported = (getattr(module, name, None) for name in module.__all__)
    return any(isinstance(obj, type) and issubclass(obj, Taskset) for obj in exported)


def alias_fastmcp() -> None:
    """verifiers 0.3.1's v1 MCP code imports `mcp.server.fastmcp` (mcp 1.x); vLLM needs mcp 2,
    where that server class is `mcp.server.mcpserver.MCPServer`. Expose it under the old name so
    v1 imports (its built-in tasksets import their toolsets eagerly)."""
    if "mcp.server.fastmcp" in sys.modules:
        return
    try:
        if importlib.util.find_spec("mcp.server.fastmcp") is not None:
            return
    except ImportError:
        pass
    from mcp.server.mcpserver import MCPServer

    module = types.ModuleType("mcp.server.fastmcp")
    vars(module)["FastMCP"] = MCPServer
    sys.modules["mcp.server.fastmcp"] = module


def env_config(env_id: str, args: dict[str, Any]) -> dict:
    """The v1 env config for `[[env]]`'s id and args."""
    taskset = {k: v for k, v in args.items() if k not in AGENT_KEYS}
    agent: dict[str, Any] = {
        "harness": {"id": args.get("harness", "null")},
        "runtime": args.get("runtime") or {"type": "subprocess"},
    }
    if args.get("max_turns") is not None:
        agent["max_turns"] = args["max_turns"]
    return {"taskset": {**taskset, "id": env_id}, "agent": agent}


class V1Env(EnvAdapter):
    """A verifiers v1 taskset with its harness, served through verifiers' interception."""

    def __init__(self, env_id: str, args: dict[str, Any]):
        alias_fastmcp()
        from verifiers.v1.utils.loaders import load_environment, resolve_env_config

        self.id = env_id
        try:
            self.env = load_environment(resolve_env_config(env_config(env_id, args)))
            taskset = self.env.taskset
            if taskset.INFINITE:
                taskset = taskset.head(MAX_TASKS)
            self.tasks = list(taskset)
        except Exception as err:  # pydantic, import and the taskset's own errors alike
            raise ConfigError(
                f"v1 taskset {env_id!r} with args {redact(args)} failed to load: "
                f"{scrub(str(err), args)}"
            ) from None
        if not self.tasks:
            raise ConfigError(f"v1 taskset {env_id!r} with args {redact(args)} has no tasks")
        self._serving: contextlib.AsyncExitStack | None = None
        self._lock = asyncio.Lock()

    @property
    def num_examples(self) -> int:
        return len(self.tasks)

    def example(self, index: int) -> dict:
        return {"example_id": index}

    def eval_examples(self, num_examples: int) -> list[dict]:
        return [{"example_id": i} for i in range(min(num_examples, len(self.tasks)))]

    async def run_group(
        self,
        example: dict,
        num_rollouts: int,
        client: Any,
        model: str,
        sampling: dict,
        seeds: list[int] | None = None,
    ) -> list[Rollout]:
        """`num_rollouts` episodes of one task, each against the least-loaded server (counted in
        its requests; a server that fails costs the episode)."""
        await self.start()
        index = int(example["example_id"])
        slots = self.env.slots(self.tasks[index], num_rollouts)

        async def one(slot, seed: int | None) -> Rollout:
            async with client.semaphore:
                pool = client.pool
                server = pool.servers[pool.pick(set()) or 0]
                server.in_flight += 1
                try:
                    context = model_context(client, server.base_url, model, seeded(sampling, seed))
                    episode = await self.env.run_slot(slot, context)
                except Exception as err:  # noqa: BLE001 - an episode's failure is its rollout's
                    logger.warning(f"v1 episode of {self.id!r} task {index} failed: {err}")
                    return Rollout(index, None, None, 0.0, error=f"{type(err).__name__}: {err}")
                finally:
                    server.in_flight -= 1
                server.served += 1
            return to_rollout(index, episode)

        seeds_or_none: Sequence[int | None] = seeds or [None] * len(slots)
        return list(await asyncio.gather(*map(one, slots, seeds_or_none)))

    async def start(self) -> None:
        """Enter verifiers' serving context (interception server, shared tools) once."""
        async with self._lock:
            if self._serving is None:
                stack = contextlib.AsyncExitStack()
                await stack.enter_async_context(self.env.serving())
                self._serving = stack

    async def close(self) -> None:
        if self._serving is not None:
            stack, self._serving = self._serving, None
            await stack.aclose()


def model_context(client: Any, base_url: str, model: str, sampling: dict) -> Any:
    """The v1 model context of one episode: the server's generate route, the tokenizer of the
    base model's local folder, the run's sampling parameters."""
    from verifiers.v1.clients import ModelContext, TrainClientConfig
    from verifiers.v1.types import SamplingConfig

    from rlcore.host.models import resolve_model

    config = TrainClientConfig(
        base_url=base_url,
        api_key_var=client.api_key_var,
        renderer_model_name=str(resolve_model(client.base_model)),
    )
    extra = dict(sampling.get("extra_body") or {})
    extra.pop("return_token_ids", None)
    wanted = {k: sampling.get(k) for k in ("max_tokens", "temperature", "top_p")}
    if sampling.get("seed") is not None:  # a deterministic run's rollout seed (every turn)
        extra["seed"] = sampling["seed"]
    return ModelContext(model=model, client=config, sampling=SamplingConfig(**wanted, **extra))


def to_rollout(example_id: int, episode: Any) -> Rollout:
    """One episode as a `Rollout`: its (single) agent's trace, each branch's sampled spans as
    turns; an episode that failed anywhere carries the error and is not trained on."""
    traces = list(episode.traces)
    errors = [e.message for e in episode.errors] + [e.message for t in traces for e in t.errors]
    if len(traces) > 1:
        errors.append(f"{len(traces)} agents ran; only single-agent v1 environments train")
    if not traces:
        return Rollout(example_id, None, None, 0.0, error="; ".join(errors) or "no agent ran")
    trace = traces[0]
    turns = [turn for branch in trace.branches for turn in branch_turns(branch)]
    if turns and trace.is_truncated:
        turns[-1].is_truncated = True
    metrics = {k: float(v) for k, v in trace.metrics.items() if v is not None}
    metrics |= {k: float(r.value) for k, r in trace.rewards.items() if r is not None}
    error = None if episode.ok and not errors else ("; ".join(errors) or "episode failed")
    return Rollout(
        example_id=example_id,
        prompt=trace.task.data.prompt,
        completion=completion_messages(trace) if trace.nodes else None,
        reward=float(trace.reward),
        metrics=metrics,
        turns=turns,
        is_truncated=bool(trace.is_truncated),
        error=None if error is None else error[-2000:],
    )


def completion_messages(trace: Any) -> list[dict]:
    """The final branch's messages from the model's first reply on (its replies with their tool
    calls, the tool results and user turns between them) as chat dicts, as a classic
    environment's completion is: what the archive, the viewer and eval results show."""
    branches = trace.branches
    nodes = branches[-1].nodes if branches else []
    first = next((i for i, node in enumerate(nodes) if node.sampled), len(nodes))
    return [jsonable(node.message) for node in nodes[first:]]


def branch_turns(branch: Any) -> list[Turn]:
    """A branch's token sequence as turns: each maximal run of sampled tokens is a completion
    whose prompt is everything before it (so the turns extend each other)."""
    ids, mask, logprobs = branch.token_ids, branch.sampled_mask, branch.logprobs
    turns, start = [], 0
    while start < len(ids):
        if not mask[start]:
            start += 1
            continue
        end = start
        while end < len(ids) and mask[end]:
            end += 1
        turns.append(Turn(list(ids[:start]), list(ids[start:end]), list(logprobs[start:end])))
        start = end
    return turns
