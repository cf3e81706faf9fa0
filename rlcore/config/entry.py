"""What every entrypoint does first: parse argv into a validated config, or exit 2 with a
message. Handles `--help`, `--json-schema` and `--print-config` itself. `entry_point` wraps
each console script's `main` (a closed standard output ends it quietly)."""

import functools
import json
import os
import select
import signal
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import ParamSpec, TypeVar

from pydantic import BaseModel

from rlcore.config.cli import ArgParser, ParsedArgs
from rlcore.config.schema import default_text, leaves, type_text
from rlcore.config.toml_io import dump_config
from rlcore.errors import USER_ERROR_EXIT_CODE, ConfigError
from rlcore.files.disk_full import GENERIC_ADVICE, exit_disk_full, is_disk_full
from rlcore.host import wheel_tags
from rlcore.secrets import redact_message

M = TypeVar("M", bound=BaseModel)
P = ParamSpec("P")
R = TypeVar("R")

BROKEN_PIPE_EXIT_CODE = 128 + signal.SIGPIPE
"""141: what a shell reports for a tool that SIGPIPE ended (`cat big | head -1`)."""


def entry_point(prog: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A console script's `main` (`prog` names it in messages), ending quietly with
    BROKEN_PIPE_EXIT_CODE when the reader of standard output has gone (`rl --help | head -1`),
    instead of a BrokenPipeError traceback: Python's own recipe (its signal module's note on
    SIGPIPE). Standard output then points at /dev/null, so the flush at exit writes nowhere. A
    BrokenPipeError from anything else (a socket) is raised as before. A full disk that no
    part of the command reported itself ends it with one message naming the file and the
    space left, and DISK_FULL_EXIT_CODE (rlcore/files/disk_full.py)."""

    def wrap(main: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(main)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            printable_streams()
            try:
                try:
                    return main(*args, **kwargs)
                finally:
                    sys.stdout.flush()  # buffered output fails here, not at interpreter exit
            except BrokenPipeError:
                if not _stdout_reader_gone():
                    raise
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.close(devnull)
                sys.exit(BROKEN_PIPE_EXIT_CODE)
            except BaseException as err:  # torch, DCP and safetensors wrap ENOSPC in their own
                if not is_disk_full(err):
                    raise
                exit_disk_full(prog, err, None, GENERIC_ADVICE)

        return run

    return wrap


def printable_streams() -> None:
    """Standard output and error write any text: a name read back from disk that is not UTF-8
    (a surrogate escape) is written as `\\udcff`, never a UnicodeEncodeError traceback."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe or socket whose reading end is closed."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # errors and hang-ups are always reported
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no stdout, or not a real file
        return False


COMMON_FLAGS = """\
  @ FILE.toml           load a config file (repeatable; later files override earlier ones)
  --KEY.PATH VALUE      override one key, kebab or snake case (e.g. --optim.lr 1e-5)
  --FLAG / --no-FLAG    set a boolean key; `None` clears an optional key
  --print-config        print the resolved config as TOML and exit
  --json-schema         print the JSON Schema of this config (for editors) and exit
  -h, --help            show this help and exit"""


def exit_with(message: str, prog: str, code: int = USER_ERROR_EXIT_CODE) -> None:
    """Print `prog: error: message`, every secret in it shown as `***` and a huge message cut
    (rlcore.secrets.redact_message), and exit (2 for a user's mistake)."""
    print(f"{prog}: error: {redact_message(message)}", file=sys.stderr)
    sys.exit(code)


def help_text(model: type[BaseModel], prog: str, usage: str, extra: str = "") -> str:
    doc = (model.__doc__ or "").strip()
    lines = [f"usage: {usage}", "", doc, "", "options:", COMMON_FLAGS]
    if extra:
        lines.append(extra)
    lines += ["", "config keys (TOML key = flag without the leading --):"]
    for leaf in leaves(model):
        default = default_text(leaf.field)
        default = f" [default: {default}]" if default else ""
        lines.append(
            f"  --{leaf.dotted.replace('_', '-')}  ({type_text(leaf.annotation)}){default}"
        )
        text = " ".join((leaf.field.description or "").split())
        lines += textwrap.wrap(text, 96, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def parse_config(
    model: type[M],
    prog: str,
    argv: list[str] | None = None,
    sections: tuple[str, ...] = (),
    usage: str = "",
    extra_help: str = "",
    first: Sequence[tuple[dict, str]] = (),
) -> tuple[M, ParsedArgs]:
    """Parse argv into a config, handling the informational flags; exit 2 on user errors.
    `first`: layers (data, label) below every file and flag, e.g. a translated workflow."""
    argv = sys.argv[1:] if argv is None else argv
    wheel_tags.repair()  # so the next `uv run` reinstalls nothing (rlcore/host/wheel_tags.py)
    parser = ArgParser(model, prog, sections)
    try:
        parsed = parser.parse(argv, first)
        if "help" in parsed.flags:
            print(
                help_text(
                    model, prog, usage or f"{prog} [@ FILE.toml ...] [--KEY VALUE ...]", extra_help
                )
            )
            sys.exit(0)
        if "json_schema" in parsed.flags:
            print(json.dumps(model.model_json_schema(), indent=2))
            sys.exit(0)
        if parsed.positionals:
            raise ConfigError(
                f"unexpected argument {parsed.positionals[0]!r}: config files need `@` "
                f"(`{prog} @ {parsed.positionals[0]}`) and keys need `--`"
            )
        config = parser.validate(parsed)
    except ConfigError as err:
        exit_with(str(err), prog)
    if "print_config" in parsed.flags:
        print(dump_config(config), end="")
        sys.exit(0)
    return config, parsed
