"""`rl plot RUN [--out PNG]`: reward, loss, entropy, mismatch_kl and throughput against step."""

import os
from pathlib import Path

from launcher.commands.base import command_parser
from launcher.commands.runs import RUN_HELP, find_run
from rlcore.errors import ConfigError
from rlcore.files.paths import path_arg
from rlcore.files.readback import Damaged, open_file
from rlcore.runs.runguard import writing_into

NAME = "plot"
IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")
"""What `rl plot` writes (matplotlib picks the format from the suffix)."""
HELP = "plot reward, loss, entropy, mismatch_kl and throughput (RUN/plot.png)"


def parser():
    parser = command_parser(NAME, HELP + "; no W&B needed.")
    parser.add_argument("run", help=RUN_HELP)
    parser.add_argument(
        "--out", type=path_arg("--out", file=True), help="the PNG to write (default: RUN/plot.png)"
    )
    return parser


def run(args) -> int:
    from launcher.plot import PLOT_FILE, plot_run

    run_dir = find_run(args.run)
    check_metrics(run_dir)
    if args.out is not None:
        check_out(args.out)
    out = args.out or run_dir.root / PLOT_FILE
    fix = (
        f"Plot it elsewhere while it runs (`rl plot {args.run} --out plot.png`), or wait for "
        "it to finish"
    )
    # Into a run only under its lock (never beside a running rl), never through a link.
    with writing_into(out, "--out" if args.out else "RUN", fix):
        print(f"rl: wrote {plot_run(run_dir, out)}")
    return 0


def check_metrics(run_dir) -> None:
    """metrics.jsonl must be there and be a file that can be read back (rlcore.files.readback: a
    FIFO, a device or a link out of the run is a damaged run folder, exit 2)."""
    try:
        os.close(open_file(run_dir.metrics, run_dir.root))
    except FileNotFoundError:
        raise ConfigError(f"{run_dir.metrics} does not exist: nothing to plot yet") from None
    except Damaged as err:
        raise ConfigError(str(err)) from None


def check_out(out: Path) -> None:
    """An image file's name, in a folder that exists and can be written."""
    from launcher.lockfile import check_writable

    if out.suffix.lower() not in IMAGE_SUFFIXES:
        raise ConfigError(
            f"--out {out}: `rl plot` writes an image; give a name ending in .png (or "
            f"{', '.join(IMAGE_SUFFIXES[1:])})"
        )
    check_writable(out, "--out")
    if not out.parent.is_dir():
        raise ConfigError(f"--out {out}: the folder {out.parent} does not exist: create it first")
