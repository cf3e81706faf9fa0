"""`sft @ FILE.toml`: parse the SFT config, then import the heavy runtime and run."""

import sys

from rlcore.entry import parse_config
from rlcore.errors import ConfigError, exit_with
from rlcore.logs import setup_logging
from trainer.dist import maybe_reexec_under_torchrun
from trainer.sft_config import SFTConfig

USAGE = "sft @ sft.toml [--KEY.PATH VALUE ...]"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    config, _ = parse_config(SFTConfig, "sft", argv, usage=USAGE)
    setup_logging("trainer", config.log.level)
    try:
        maybe_reexec_under_torchrun(argv, module="trainer.sft_main")
    except ConfigError as err:
        exit_with(str(err), "sft")
    from trainer.sft import run

    try:
        run(config)
    except ConfigError as err:
        exit_with(str(err), "sft")


if __name__ == "__main__":
    main()
