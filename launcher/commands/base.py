"""What every `rl` subcommand shares: an argparse parser whose mistakes are one message and
exit 2 (never a traceback), and whose `-h/--help` prints the subcommand's own usage (a command
that asks the user asks through launcher.prompt)."""

import argparse

from rlcore.errors import ConfigError


class CommandParser(argparse.ArgumentParser):
    """argparse with errors as ConfigError (exit 2 through the dispatcher, usage included)."""

    def error(self, message: str):
        raise ConfigError(f"{message}\n{self.format_usage().strip()}")


def command_parser(name: str, description: str, epilog: str = "") -> CommandParser:
    return CommandParser(
        prog=f"rl {name}",
        description=description,
        epilog=epilog or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
