"""`orchestrator @ FILE.toml`: parse the config, then import the heavy runtime and run."""

import sys

from launcher.entry import parse_config
from orchestrator.config import OrchestratorConfig


def main(argv: list[str] | None = None) -> None:
    config, _ = parse_config(OrchestratorConfig, "orchestrator", argv)
    print(f"orchestrator: runtime not implemented yet; config parsed for {config.model.name}")
    sys.exit(1)


if __name__ == "__main__":
    main()
