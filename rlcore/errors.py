"""User-facing errors: one clear message and exit code 2, never a traceback (the message is
printed by rlcore.config.entry.exit_with, secrets redacted)."""

USER_ERROR_EXIT_CODE = 2


class ConfigError(Exception):
    """A mistake in a config file, flag or run setup that the user can fix."""
