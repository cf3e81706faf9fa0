"""`inference @ FILE.toml`: parse the config, then import the heavy runtime and run."""

from inference.config import InferenceConfig
from rlcore.config.entry import entry_point, parse_config


@entry_point("inference")
def main(argv: list[str] | None = None) -> None:
    config, _ = parse_config(InferenceConfig, "inference", argv)
    from inference.server import run

    run(config)


if __name__ == "__main__":
    main()
