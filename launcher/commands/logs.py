"""`rl logs [RUN] [COMPONENT] [-f]`: print (or follow) a run's logs. A log is read back as data
(rlcore.files.readback): a regular file only (a FIFO, a device or a link out of the run is one line
saying so), and only its last LOG_TAIL bytes are printed at first (a line says how much came
before and where the whole file is), so a huge log never floods the terminal nor memory."""

import re
import sys
import time
from pathlib import Path

from launcher.commands.base import command_parser
from launcher.commands.runs import RUN_HELP, SFT_PROCESS, find_run, latest_run
from rlcore.errors import ConfigError
from rlcore.files.readback import LOG_TAIL, Damaged, decode, read_from, read_tail, shown
from rlcore.runs.rundir import COMPONENTS

NAME = "logs"
HELP = "print (or follow) a run's logs"
REPLICA = re.compile(r"inference-\d+$")


def parser():
    parser = command_parser(NAME, HELP + "; all components' lines, prefixed, without COMPONENT.")
    parser.add_argument(
        "items",
        nargs="*",
        metavar="RUN COMPONENT",
        help=f"RUN: {RUN_HELP} (default: the latest active run); COMPONENT: "
        "rl, trainer, orchestrator, inference, inference-<i> or sft (an `rl sft` "
        "run's)",
    )
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    return parser


def is_component(word: str) -> bool:
    return word in (*COMPONENTS, "rl", SFT_PROCESS) or bool(REPLICA.match(word))


def run(args) -> int:
    components = [a for a in args.items if is_component(a)]
    names = [a for a in args.items if not is_component(a)]
    if len(components) > 1 or len(names) > 1:
        raise ConfigError(f"give at most one RUN and one COMPONENT, got {args.items}")
    run_dir = find_run(names[0]) if names else latest_run()
    component = components[0] if components else None
    replicas = sorted(f.stem for f in run_dir.logs.glob("inference-*.log"))
    every = ["inference", *replicas, "orchestrator", "trainer", SFT_PROCESS]
    wanted = [component] if component else every
    files = [run_dir.log_file(n) for n in wanted if run_dir.log_file(n).is_file()]
    if not files:
        raise ConfigError(f"no logs in {run_dir.logs}")
    offsets = {}
    for f in files:
        offsets[f] = print_tail(f, run_dir.root, prefix=None if component else f.stem)
    try:
        while args.follow:
            time.sleep(0.5)
            for f in files:
                if (offset := offsets[f]) is not None:
                    offsets[f] = print_new_lines(
                        f, run_dir.root, offset, prefix=None if component else f.stem
                    )
    except KeyboardInterrupt:
        pass
    return 0


def show(lines: list[str], prefix: str | None) -> None:
    for line in lines:
        print(line if prefix is None else f"[{prefix}] {line}", flush=True)
    sys.stdout.flush()


def print_tail(path: Path, root: Path, prefix: str | None) -> int | None:
    """Print the last LOG_TAIL bytes of the log `path` (from its first whole line), saying how
    much came before; the offset to follow from, or None (after one line saying why) for a
    file that cannot be read as a log."""
    try:
        data, start = read_tail(path, LOG_TAIL, root)
    except (FileNotFoundError, Damaged) as err:
        show([f"rl: {err}" if isinstance(err, Damaged) else f"rl: {shown(path)} is gone"], prefix)
        return None
    if start > 0:
        cut = data.find(b"\n") + 1
        data, start = data[cut:], start + cut
        show([f"rl: ... {start:,} bytes before these lines (the whole log: {shown(path)})"], prefix)
    show(decode(data).splitlines(), prefix)
    return start + len(data)


def print_new_lines(path: Path, root: Path, offset: int, prefix: str | None) -> int | None:
    """Print the whole lines written after byte `offset` (at most LOG_TAIL bytes a call); the
    offset after them, or None when the file can no longer be read as a log."""
    try:
        data = read_from(path, offset, LOG_TAIL, root)
    except (FileNotFoundError, Damaged):
        return offset
    end = data.rfind(b"\n") + 1 if len(data) < LOG_TAIL.max_bytes else len(data)
    show(decode(data[:end]).splitlines(), prefix)
    return offset + end
