"""`sft @ FILE.toml`: parse the SFT config, then import the heavy runtime and run.
`--check-data` only reads and tokenizes the data (exit 2 naming a bad file or row), as `rl sft`
does before it touches the run folder."""

import sys
from typing import TYPE_CHECKING

from rlcore.config.entry import entry_point, exit_with, parse_config
from rlcore.errors import ConfigError
from rlcore.files.disk_full import CKPT_ADVICE, exit_disk_full, is_disk_full
from rlcore.processes.heap import bound_kernel_caches
from rlcore.reporting.logs import setup_logging
from trainer.dist import maybe_reexec_under_torchrun
from trainer.sft.config import SFTConfig

if TYPE_CHECKING:
    from rlcore.forecast.model import Forecast

USAGE = "sft @ sft.toml [--KEY.PATH VALUE ...] [--check-data]"
CHECK_FLAG = "--check-data"


def check_data(config: SFTConfig) -> None:
    """Read and tokenize the data as a run will; say the examples' mean tokens on stdout (its
    one line there: `rl sft`'s estimate reads it, rlcore.forecast.report.tokens_said)."""
    from rlcore.forecast.report import TOKENS_SAID
    from rlcore.host.models import resolve_model
    from trainer.sft.train import load_examples

    try:
        examples, _ = load_examples(config, resolve_model(config.model.name))
    except (ConfigError, ValueError) as err:
        exit_with(str(err), "sft")
    if examples:
        print(f"{TOKENS_SAID}{sum(len(e.ids) for e in examples) / len(examples):.1f}", flush=True)


def say_estimate(config: SFTConfig) -> "Forecast | None":
    """The run's estimate (rlcore/forecast), when started alone (`rl sft` prints it itself);
    None otherwise. Never stops the run: one line when it cannot be made."""
    import os

    from rlcore.runs.runguard import LAUNCHER_ENV

    if os.environ.get(LAUNCHER_ENV) or "RANK" in os.environ:  # torchrun: its parent said it
        return None
    from rlcore.forecast.report import sft_forecast

    forecast, lines = sft_forecast(config)
    print("\n".join(lines), flush=True)
    return forecast


@entry_point("sft")
def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    check_only = CHECK_FLAG in argv
    argv = [a for a in argv if a != CHECK_FLAG]
    config, _ = parse_config(SFTConfig, "sft", argv, usage=USAGE)
    setup_logging("trainer", config.log.level)
    if check_only:
        check_data(config)
        return
    forecast = say_estimate(config)
    bound_kernel_caches()  # before torch's first matmul (rlcore/processes/heap.py)
    try:
        maybe_reexec_under_torchrun(argv, module="trainer.sft.main")
    except ConfigError as err:
        exit_with(str(err), "sft")
    from rlcore.forecast.report import keep_measurement
    from trainer.sft.train import run

    try:
        run(config, started=lambda: keep_measurement(forecast))  # its measurement, once set up
    except ConfigError as err:
        exit_with(str(err), "sft")
    except BaseException as err:  # DCP wraps write errors in a BaseException subclass
        if not is_disk_full(err):
            raise
        exit_disk_full("sft", err, config.output_dir, CKPT_ADVICE)


if __name__ == "__main__":
    main()
