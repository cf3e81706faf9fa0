"""`inference @ FILE.toml`: parse the config, then import the heavy runtime and run."""

import sys

from inference.config import InferenceConfig
from launcher.entry import parse_config


def main(argv: list[str] | None = None) -> None:
    config, _ = parse_config(InferenceConfig, "inference", argv)
    print(f"inference: runtime not implemented yet; config parsed for {config.model.name}")
    sys.exit(1)


if __name__ == "__main__":
    main()
