"""User-facing errors: one clear message and exit code 2, never a traceback."""

import sys

USER_ERROR_EXIT_CODE = 2


class ConfigError(Exception):
    """A mistake in a config file, flag or run setup that the user can fix."""


def exit_with(message: str, prog: str) -> None:
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(USER_ERROR_EXIT_CODE)
