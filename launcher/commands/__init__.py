"""The `rl` subcommands, one module each (NAME, HELP, `parser()`, `run(args)`), and the one
registry that the dispatcher and `rl --help` both read. A new subcommand is a module here and a
line in COMMANDS."""

import sys

from launcher.commands import (
    delete,
    export,
    hf,
    init,
    list_runs,
    logs,
    plot,
    status,
    stop,
    tasks,
    view,
)
from rlcore.errors import USER_ERROR_EXIT_CODE, ConfigError
from rlcore.files.readback import Damaged, shown
from rlcore.secrets import redact_message

COMMANDS = {
    m.NAME: m for m in (init, tasks, hf, status, list_runs, logs, stop, delete, plot, export, view)
}


def commands_help() -> str:
    """One line per subcommand for `rl --help`."""
    return "\n".join(f"  {name:<8} {module.HELP}" for name, module in COMMANDS.items())


def run_command(name: str, argv: list[str]) -> int:
    """Parse and run one subcommand; a user mistake, a damaged run folder (rlcore.files.readback),
    or an OS error the command did not name itself, is one message (secrets in it redacted, a
    huge one cut: rlcore.secrets.redact_message) and exit 2."""
    module = COMMANDS[name]
    try:
        args = module.parser().parse_args(argv)
        return module.run(args)
    except (ConfigError, Damaged) as err:
        message = str(err)
    except OSError as err:
        where = f"{shown(err.filename)}: " if err.filename else ""
        message = f"{where}{err.strerror or err}"
    print(f"rl {name}: error: {redact_message(message)}", file=sys.stderr)
    return USER_ERROR_EXIT_CODE
