"""`orchestrator @ FILE.toml`: parse the config, then import the heavy runtime and run."""

import sys

from orchestrator.config import OrchestratorConfig
from rlcore.config.entry import entry_point, exit_with, parse_config
from rlcore.errors import ConfigError
from rlcore.files.disk_full import exit_disk_full, is_disk_full
from rlcore.processes.children import stop_descendants_on_exit
from rlcore.reporting.logs import setup_logging

BATCH_ADVICE = (
    "the batch or checkpoint being written was not kept (nothing half-written is ever read); "
    "free space and resume with --ckpt.resume-step -1"
)


@entry_point("orchestrator")
def main(argv: list[str] | None = None) -> None:
    config, _ = parse_config(OrchestratorConfig, "orchestrator", argv)
    stop_descendants_on_exit()  # environments' MCP servers lead sessions of their own
    from orchestrator.client import OrchestratorError
    from orchestrator.loop import run

    setup_logging("orchestrator", config.log.level)
    try:
        run(config)
    except ConfigError as err:
        exit_with(str(err), "orchestrator")
    except OrchestratorError as err:
        exit_with(str(err), "orchestrator", 1)
    except Exception as err:  # safetensors reports a full disk as its own SafetensorError
        if not is_disk_full(err):
            raise
        exit_disk_full("orchestrator", err, config.output_dir, BATCH_ADVICE)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
