"""`evals @ eval.toml [--KEY VALUE ...]`: parse the config, then import the heavy runtime and
evaluate (orchestrator/evals/run.py). Environments that are not installed are refused first,
before any write or server start."""

import sys
from collections.abc import Callable

from orchestrator.evals.config import EvalsConfig
from rlcore.config.entry import entry_point, exit_with, parse_config
from rlcore.errors import ConfigError
from rlcore.host.environments import check_envs
from rlcore.processes.children import stop_descendants_on_exit
from rlcore.reporting.logs import setup_logging

USAGE = (
    "evals @ eval.toml [--KEY.PATH VALUE ...]  (--run RUN --step N: a run's policy; --watch RUN: "
    "each new policy of a live run)"
)

WATCH_ESTIMATE = (
    "each policy is evaluated as the run publishes it, beside the training that shares the "
    "machine; `evals --run RUN --step N` estimates one"
)


@entry_point("evals")
def main(argv: list[str] | None = None) -> None:
    config, _ = parse_config(EvalsConfig, "evals", argv, usage=USAGE)
    try:
        check_envs(config.eval.env, "eval.env")  # in a second, not after vLLM has started
    except ConfigError as err:
        exit_with(str(err), "evals")
    stop_descendants_on_exit()  # environments' MCP servers lead sessions of their own
    setup_logging("orchestrator", config.log.level)
    from orchestrator.client import OrchestratorError

    run: Callable[[EvalsConfig], object]
    if config.watch is not None:
        from orchestrator.evals.watch import watch as run

        print(f"Estimate: not made (--watch: {WATCH_ESTIMATE})", flush=True)
    else:
        from orchestrator.evals.run import run

    try:
        run(config)
    except ConfigError as err:
        exit_with(str(err), "evals")
    except OrchestratorError as err:
        exit_with(str(err), "evals", 1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
