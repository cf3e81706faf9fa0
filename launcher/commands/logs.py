"""`rl logs [RUN] [COMPONENT] [-f]`: print (or follow) a run's logs."""

import re
import sys
import time

from launcher.commands.base import command_parser
from launcher.commands.runs import RUN_HELP, SFT_PROCESS, find_run, latest_run
from rlcore.errors import ConfigError
from rlcore.rundir import COMPONENTS

NAME = "logs"
HELP = "print (or follow) a run's logs"
REPLICA = re.compile(r"inference-\d+$")


def parser():
    parser = command_parser(NAME, HELP + "; all components' lines, prefixed, without COMPONENT.")
    parser.add_argument("items", nargs="*", metavar="RUN COMPONENT",
                        help=f"RUN: {RUN_HELP} (default: the latest active run); COMPONENT: "
                        "rl, trainer, orchestrator, inference, inference-<i> or sft (an `rl sft` "
                        "run's)")  # fmt: skip
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
        text = f.read_text(errors="replace")
        print(text if component else "".join(f"[{f.stem}] {line}\n" for line in text.splitlines()))
        offsets[f] = f.stat().st_size
    try:
        while args.follow:
            time.sleep(0.5)
            for f in files:
                print_new_lines(f, offsets, prefix=None if component else f.stem)
    except KeyboardInterrupt:
        pass
    return 0


def print_new_lines(path, offsets: dict, prefix: str | None) -> None:
    with path.open("rb") as handle:
        handle.seek(offsets[path])
        new = handle.read().decode(errors="replace")
    offsets[path] += len(new.encode())
    for line in new.splitlines():
        print(line if prefix is None else f"[{prefix}] {line}", flush=True)
    sys.stdout.flush()
