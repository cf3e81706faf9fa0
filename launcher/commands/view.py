"""`rl view [PATH...] [--port N] [--host ADDR]`: a local web app over run folders (launcher/view/),
read-only, offline (every file it serves comes from this project or an installed package).
Bound to 127.0.0.1 unless told otherwise; on any other address every request needs the token
it prints in its URL (or the one in `--token-env VAR`)."""

import os
import secrets
import socket
from pathlib import Path

from launcher.commands.base import command_parser
from rlcore.config.base import RUNS_ROOT
from rlcore.errors import ConfigError
from rlcore.files.paths import path_arg

NAME = "view"
HELP = "browse runs in a local web page: curves, rollouts, evals, comparisons"
DEFAULT_PORT = 8765
EPILOG = """\
Each PATH is a run folder or a folder of runs (default: outputs/). Pages: the runs list, one
run (live curves, configs, checkpoints, logs, stalls and errors), its rollouts by group, its
evaluations, and a comparison of 2 to 4 runs. Nothing is ever written into a run.

Security: bound to 127.0.0.1 by default (requests must name a loopback host). Any other
--host needs a token: one is generated and printed in the URL (or give it in the environment
variable --token-env names); every request without it gets 401. Only files inside the PATHs
are ever read, links that lead out of them included."""


def parser():
    parser = command_parser(NAME, HELP + ".", EPILOG)
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        type=path_arg("PATH"),
        help="run folders or folders of runs (default: outputs/)",
    )
    port_help = f"port to serve on (default {DEFAULT_PORT}; 0: any free port)"
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=port_help)
    host_help = "address to bind (default 127.0.0.1; any other needs a token)"
    parser.add_argument("--host", default="127.0.0.1", help=host_help)
    token_help = "environment variable holding the token (default: a new one)"
    parser.add_argument("--token-env", metavar="VAR", help=token_help)
    return parser


def folders(paths: list[Path]) -> list[Path]:
    chosen = paths or [RUNS_ROOT.resolve()]
    for path in chosen:
        if not path.is_dir():
            what = "does not exist" if not path.exists() else "is not a folder"
            raise ConfigError(f"PATH {path} {what}: give a run folder or a folder of runs")
    return chosen


def token_for(host: str, token_env: str | None) -> str | None:
    from launcher.view.guard import is_loopback

    if token_env:
        value = os.environ.get(token_env, "")
        if len(value) < 16:
            raise ConfigError(
                f"--token-env {token_env}: the variable is unset or shorter than "
                "16 characters: export a long random token in it"
            )
        return value
    return None if is_loopback(host) else secrets.token_urlsafe(24)


def bind(host: str, port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port} is not a port (0 to 65535)")
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as err:
        raise ConfigError(f"--host {host!r} is not an address here ({err.strerror})") from None
    sock = socket.socket(info[0], socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(info[4])
    except OSError as err:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({err.strerror}): choose another "
            "--port (0: any free one)"
        ) from None
    sock.listen(64)
    return sock


def url_of(sock: socket.socket, host: str, token: str | None) -> str:
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def run(args) -> int:
    import uvicorn

    from launcher.view.app import make_app
    from launcher.view.guard import is_loopback
    from launcher.view.library import Library

    roots = folders(args.paths)
    token = token_for(args.host, args.token_env)
    sock = bind(args.host, args.port)
    app = make_app(Library(roots), token=token, loopback=is_loopback(args.host))
    print(f"rl view: {', '.join(map(str, roots))}")
    if token:
        print(
            f"rl view: listening on {args.host}, beyond loopback: every request needs the "
            "token in this URL (keep it to yourself)"
        )
    print(f"rl view: open {url_of(sock, args.host, token)}  (Ctrl-C stops it)", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    return 0
