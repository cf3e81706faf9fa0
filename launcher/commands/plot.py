"""`rl plot RUN [--out PNG]`: reward, loss, entropy, mismatch_kl and throughput against step."""

from launcher.commands.base import command_parser
from launcher.commands.runs import RUN_HELP, find_run
from rlcore.errors import ConfigError
from rlcore.paths import path_arg

NAME = "plot"
HELP = "plot reward, loss, entropy, mismatch_kl and throughput (RUN/plot.png)"


def parser():
    parser = command_parser(NAME, HELP + "; no W&B needed.")
    parser.add_argument("run", help=RUN_HELP)
    parser.add_argument("--out", type=path_arg("--out", file=True),
                        help="the PNG to write (default: RUN/plot.png)")  # fmt: skip
    return parser


def run(args) -> int:
    from launcher.plot import plot_run

    run_dir = find_run(args.run)
    if not run_dir.metrics.exists():
        raise ConfigError(f"{run_dir.metrics} does not exist: nothing to plot yet")
    if args.out is not None and args.out.is_dir():
        raise ConfigError(f"--out {args.out} is a folder: give a file name, e.g. curves.png")
    print(f"rl: wrote {plot_run(run_dir, args.out)}")
    return 0
