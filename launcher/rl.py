"""`rl`: compose the three configs, check everything, start and supervise the processes.

rl --trainer @ train.toml --orchestrator @ orch.toml --inference @ infer.toml [--flags]
rl @ rl.toml [--flags]
rl init [ENV_ID] | rl status [DIR] | rl logs [DIR] [COMPONENT] [-f] | rl stop [DIR]
"""

import sys
import time

from launcher.rl_config import RLConfig
from launcher.shared import shared_help
from rlcore.entry import parse_config
from rlcore.errors import ConfigError, exit_with
from rlcore.toml_io import dump_config

USAGE = (
    "rl [@ rl.toml] [--trainer @ train.toml] [--orchestrator @ orch.toml] "
    "[--inference @ infer.toml] [--KEY VALUE ...] [--dry-run] [--clean]\n"
    "       rl init [ENV_ID] | rl status [DIR] | rl logs [DIR] [COMPONENT] [-f] | rl stop [DIR]"
)
EXTRA_HELP = """\
  --trainer @ FILE      load FILE into [trainer] (also --orchestrator @, --inference @)
  --dry-run             print the resolved configs, GPU map and commands; start and write nothing
  --clean               delete everything in output_dir (checkpoints too) before starting

subcommands:
  init [ENV_ID]         print a commented rl.toml to start from
  status [DIR]          components, step, latest checkpoint and disk use of a run
  logs [DIR] [COMP] [-f]  print (or follow) a run's logs
  stop [DIR]            stop a running run cleanly

Shared keys: set once (top level, or in one sub-config) they fill every component that carries
them; two places with different values are an error naming both.
{shared}"""

SUBCOMMANDS = ("init", "status", "logs", "stop")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        from launcher.manage import run_subcommand

        sys.exit(run_subcommand(argv[0], argv[1:]))
    config, parsed = parse_config(
        RLConfig,
        "rl",
        argv,
        sections=("trainer", "orchestrator", "inference"),
        usage=USAGE,
        extra_help=EXTRA_HELP.format(shared=shared_help()),
    )
    from launcher.plan import describe, make_plan

    dry_run = "dry_run" in parsed.flags
    try:
        plan = make_plan(config, dry_run=dry_run)
    except ConfigError as err:
        exit_with(str(err), "rl")
    for warning in plan.warnings:
        print(f"rl: warning: {warning}", file=sys.stderr)
    if dry_run:
        print(f"# resolved config (rl @ this file reproduces it)\n{dump_config(plan.config)}")
        print(describe(plan))
        return
    from launcher.launch import launch

    started = time.monotonic()
    code = launch(plan, clean="clean" in parsed.flags)
    print(f"rl: finished in {time.monotonic() - started:.0f} s with exit code {code}")
    sys.exit(code)


if __name__ == "__main__":
    main()
