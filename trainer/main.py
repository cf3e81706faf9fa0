"""`trainer @ FILE.toml`: parse the config, then import the heavy runtime and run."""

import sys

from launcher.entry import parse_config
from launcher.errors import ConfigError, exit_with
from trainer.config import TrainerConfig
from trainer.dist import maybe_reexec_under_torchrun


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    config, _ = parse_config(TrainerConfig, "trainer", argv)
    maybe_reexec_under_torchrun(argv)
    from trainer.data import BatchError
    from trainer.train import run

    try:
        run(config)
    except ConfigError as err:
        exit_with(str(err), "trainer")
    except (TimeoutError, BatchError) as err:
        print(f"trainer: error: {err}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
