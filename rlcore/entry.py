"""What every entrypoint does first: parse argv into a validated config, or exit 2 with a
message. Handles `--help`, `--json-schema` and `--print-config` itself."""

import json
import sys
import textwrap
from typing import TypeVar

from pydantic import BaseModel

from rlcore.cli import ArgParser, ParsedArgs
from rlcore.errors import USER_ERROR_EXIT_CODE, ConfigError
from rlcore.schema import default_text, leaves, type_text
from rlcore.secrets import redact_urls
from rlcore.toml_io import dump_config

M = TypeVar("M", bound=BaseModel)

COMMON_FLAGS = """\
  @ FILE.toml           load a config file (repeatable; later files override earlier ones)
  --KEY.PATH VALUE      override one key, kebab or snake case (e.g. --optim.lr 1e-5)
  --FLAG / --no-FLAG    set a boolean key; `None` clears an optional key
  --print-config        print the resolved config as TOML and exit
  --json-schema         print the JSON Schema of this config (for editors) and exit
  -h, --help            show this help and exit"""


def exit_with(message: str, prog: str, code: int = USER_ERROR_EXIT_CODE) -> None:
    """Print `prog: error: message`, the secrets of every URL in it shown as `***`, and exit
    (2 for a user's mistake)."""
    print(f"{prog}: error: {redact_urls(message)}", file=sys.stderr)
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
    first: list[tuple[dict, str]] = (),
) -> tuple[M, ParsedArgs]:
    """Parse argv into a config, handling the informational flags; exit 2 on user errors.
    `first`: layers (data, label) below every file and flag, e.g. a translated workflow."""
    argv = sys.argv[1:] if argv is None else argv
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
