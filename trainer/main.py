"""`trainer @ FILE.toml`: parse the config, then import the heavy runtime and run."""

import sys

from rlcore.config.entry import entry_point, exit_with, parse_config
from rlcore.errors import ConfigError
from rlcore.files.disk_full import CKPT_ADVICE, exit_disk_full, is_disk_full
from rlcore.processes.heap import bound_kernel_caches
from rlcore.reporting.logs import setup_logging
from trainer.config import TrainerConfig
from trainer.dist import maybe_reexec_under_torchrun


@entry_point("trainer")
def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    config, _ = parse_config(TrainerConfig, "trainer", argv)
    setup_logging("trainer", config.log.level)
    bound_kernel_caches()  # before torch's first matmul (rlcore/processes/heap.py)
    try:
        maybe_reexec_under_torchrun(argv, config.nodes)
    except ConfigError as err:
        exit_with(str(err), "trainer")
    from trainer.data import BatchError
    from trainer.train import TrainingError, run

    try:
        run(config)
    except ConfigError as err:
        exit_with(str(err), "trainer")
    except (TimeoutError, BatchError, TrainingError) as err:
        exit_with(str(err), "trainer", 1)
    except BaseException as err:  # DCP wraps write errors in a BaseException subclass
        if not is_disk_full(err):
            raise
        exit_disk_full("trainer", err, config.output_dir, CKPT_ADVICE)


if __name__ == "__main__":
    main()
