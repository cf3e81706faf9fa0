"""The routes of `rl view`. Pages are Jinja2 templates (templates/), curves are drawn in the
browser by Plotly.js from JSON routes under /api/ that the pages poll, and static files come
from a fixed list (static/ and the plotly wheel's own plotly.min.js). A run is named by the id
the server gave it (launcher.view.library), steps and pages by integers; any other input is
checked by launcher.view.safe. Errors are a page (or JSON under /api/) with their status.

Every route is a coroutine that hands its reading to a pool of its own: a run's pages to
PAGE_WORKERS threads (at most MAX_WAITING waiting, beyond which a page answers 503), the runs
list to LIST_WORKERS others, and the list is answered from memory, read again in the background
when older than LIST_FRESH_S: however many slow pages are open, the runs list answers. JSON
answers carry NaN and infinities as words and any text repaired (`SafeJSON`)."""

import asyncio
import functools
import importlib.util
import json
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.exceptions import HTTPException

from launcher.view import archive, compare, safe
from launcher.view.curves import Curves, add_columns, panels
from launcher.view.data import RunData, one_line
from launcher.view.guard import Guard
from launcher.view.library import Library
from rlcore.files.readback import Damaged, clean_text, json_safe

HERE = Path(__file__).parent
MAX_COMPARED = 4
POLL_MS = 2000
PAGE_WORKERS = 2
"""Threads that read a run's pages: each holds at most a page's bounded reads in memory."""
LIST_WORKERS = 2
MAX_WAITING = 64
"""Pages waiting for a thread beyond which a page answers 503 (busy)."""
LIST_FRESH_S = 1.0
"""How long the runs list is served from memory (its page polls every POLL_MS)."""


class SafeJSON(JSONResponse):
    """A JSON answer of anything read back: NaN and infinities as "NaN", "Infinity" and
    "-Infinity", lone surrogates repaired (rlcore.files.readback.json_safe), never an encoding
    error."""

    def render(self, content) -> bytes:
        text = json.dumps(
            json_safe(content), ensure_ascii=False, allow_nan=False, separators=(",", ":")
        )
        return text.encode("utf-8")


def plotly_js() -> Path:
    """plotly.min.js as the plotly wheel installs it (no CDN, nothing fetched)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the plotly package is not installed")
    return Path(spec.submodule_search_locations[0]) / "package_data" / "plotly.min.js"


STATIC = {"app.js": HERE / "static" / "app.js", "view.css": HERE / "static" / "view.css"}


class ViewError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Site:
    """What every route uses: the runs (launcher.view.library), the templates, the static
    files, and the thread pools that read them."""

    def __init__(self, library: Library):
        self.library = library
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"])
        )
        self.templates.filters["num"] = number
        self.static = {**STATIC, "plotly.min.js": plotly_js()}
        self.pages = ThreadPoolExecutor(PAGE_WORKERS, thread_name_prefix="rl-view-page")
        self.lists = ThreadPoolExecutor(LIST_WORKERS, thread_name_prefix="rl-view-list")
        self.waiting = 0
        self.listed: tuple[float, list[dict]] | None = None
        self.listing: Future | None = None
        warm_up(self.templates)

    def page(self, name: str, status: int = 200, **context) -> HTMLResponse:
        html = self.templates.get_template(name).render(poll_ms=POLL_MS, **context)
        return HTMLResponse(clean_text(html), status_code=status)

    def run_of(self, rid: str) -> RunData:
        run = self.library.get(rid)
        if run is None:
            raise ViewError(404, f"no run with id {rid!r} (the runs list names every run found)")
        return run

    async def work(self, call, *args, **kwargs):
        """`call(*args, **kwargs)` on a page thread; 503 when MAX_WAITING are waiting."""
        if self.waiting >= MAX_WAITING:
            raise ViewError(503, f"busy: {self.waiting} pages are being read; try again soon")
        self.waiting += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.pages, functools.partial(call, *args, **kwargs))
        finally:
            self.waiting -= 1

    async def runs(self) -> list[dict]:
        """Every run's summary, read on the list's own threads, one reading at a time (shared
        by every request that asks meanwhile). Once read, the list is answered from memory at
        once, and read again in the background when older than LIST_FRESH_S."""
        stale = self.listed is None or time.monotonic() - self.listed[0] >= LIST_FRESH_S
        if stale and (self.listing is None or self.listing.done()):
            self.listing = self.lists.submit(self.read_runs)
        if self.listed is not None:
            return self.listed[1]
        assert self.listing is not None, "a stale list is being read"
        return await asyncio.shield(asyncio.wrap_future(self.listing))

    def read_runs(self) -> list[dict]:
        found = [
            dict(id=rid, **run.summary(brief=True))
            for rid, run in sorted(self.library.rescan().items(), key=lambda item: item[1].name)
        ]
        self.listed = (time.monotonic(), found)
        return found


def make_app(library: Library, token: str | None = None, loopback: bool = True) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, default_response_class=SafeJSON)
    app.add_middleware(Guard, token=token, loopback=loopback)
    site = Site(library)
    for add in (
        add_error_handlers,
        add_list_routes,
        add_run_routes,
        add_sample_routes,
        add_eval_routes,
        add_compare_routes,
    ):
        add(app, site)
    return app


def add_error_handlers(app: FastAPI, site: Site) -> None:
    """Every error a page (or JSON under /api/) with its status; never a traceback."""

    @app.exception_handler(ViewError)
    async def view_error(request: Request, err: ViewError):
        return error_response(request, err.status, str(err), site.page)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):
        return error_response(request, err.status_code, str(err.detail), site.page)

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(request: Request, err: RequestValidationError):
        found = [f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}" for e in err.errors()]
        return error_response(request, 400, f"bad request: {'; '.join(found)}", site.page)

    async def known_error(request: Request, err: Exception):
        return error_response(request, *classify(err), site.page)

    for kind in (safe.Refused, safe.Missing, archive.Unreadable, Damaged, OSError):
        app.add_exception_handler(kind, known_error)

    @app.exception_handler(Exception)
    async def any_error(request: Request, err: Exception):
        # A page saying what failed; the server's own log keeps the traceback.
        print(
            f"rl view: {clean_text(request.url.path)}: {err.__class__.__name__}: {one_line(err)}",
            file=sys.stderr,
        )
        return error_response(request, *classify(err), site.page)


def add_list_routes(app: FastAPI, site: Site) -> None:
    """The static files, the runs list and a run by its relative path."""

    @app.get("/static/{name}")
    async def static_file(name: str):
        if name not in site.static:
            raise ViewError(404, f"no static file {name!r}")
        return FileResponse(site.static[name], headers={"Cache-Control": "max-age=3600"})

    @app.get("/", response_class=HTMLResponse)
    async def runs_page():
        runs = await site.runs()
        return site.page(
            "runs.html", runs=runs, folders=[one_line_path(f) for f in site.library.folders]
        )

    @app.get("/api/runs")
    async def runs_json():
        return SafeJSON(await site.runs())

    @app.get("/at/{relative:path}")
    async def run_at(relative: str):
        rid = await site.work(find_at, site.library, relative)
        return RedirectResponse(f"/run/{rid}", status_code=303)


def add_run_routes(app: FastAPI, site: Site) -> None:
    """One run's page and the JSON it polls."""

    def run_page(rid: str):
        run = site.run_of(rid)
        summary = run.summary(disk=False)
        return site.page(
            "run.html",
            rid=rid,
            run=summary,
            configs=run.config_texts(),
            checkpoints=run.checkpoints(),
            logs=run.log_tails(),
            waits=run.waits(),
            restarts=run.restarts(),
            has_samples=bool(run.names(archive.SAMPLES)),
            has_evals=bool(run.eval_steps()),
        )

    def curves_json(rid: str, key: str, points: int):
        run = site.run_of(rid)
        with run.lock:
            try:
                curves = run.curves()
            except Damaged:
                curves = Curves()
            version = "-".join(map(str, curves.key))
            if key and key == version:
                return {"key": version, "unchanged": True}
            limit = min(max(points, 10), 5000)
            return {
                "key": version,
                "panels": panels(curves, limit),
                "markers": curves.markers,
                "sampled": curves.sampled,
                "summary": run.summary(disk=False),
                "waits": run.waits(),
            }

    def logs_json(rid: str, lines: int):
        return {name: tail for name, tail in site.run_of(rid).log_tails(min(max(lines, 1), 500))}

    app.get("/run/{rid}", response_class=HTMLResponse)(via(site, run_page))
    app.get("/api/run/{rid}/curves")(via(site, curves_json, key="", points=600))
    app.get("/api/run/{rid}/logs")(via(site, logs_json, lines=40))


def via(site: Site, call, **defaults):
    """A route that runs `call` on a page thread (`Site.work`); `defaults` are its query
    parameters; data it returns is answered as SafeJSON."""
    import inspect

    async def route(**kwargs):
        found = await site.work(call, **kwargs)
        # json.dumps at once: FastAPI's encoder would walk every number of a curve first
        return SafeJSON(found) if isinstance(found, dict | list) else found

    keyword, empty = inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.empty
    params = [
        inspect.Parameter(
            name, keyword, default=defaults.get(name, empty), annotation=param.annotation
        )
        for name, param in inspect.signature(call).parameters.items()
    ]
    vars(route)["__signature__"] = inspect.Signature(params)  # what inspect.signature reads
    route.__name__ = call.__name__
    return route


def add_sample_routes(app: FastAPI, site: Site) -> None:
    """A run's rollouts, as pages and as JSON, and a stored text a page at a time."""

    def rollouts_page(
        rid: str,
        step: str,
        env: str,
        low: str,
        high: str,
        page_index: int,
        tokens: bool,
        token_start: int,
    ):
        run = site.run_of(rid)
        steps = archive.sample_steps(run)
        view, bounds = None, (number_arg(low, "low"), number_arg(high, "high"))
        if steps:
            chosen = steps[-1] if not step.strip() else int(number_arg(step, "step", int))
            view = archive.groups_page(run, chosen, env, *bounds, page_index, tokens, token_start)
        return site.page(
            "rollouts.html",
            rid=rid,
            run={"name": run.name},
            steps=steps,
            view=view,
            env=env,
            low=bounds[0],
            high=bounds[1],
            tokens=tokens,
        )

    def rollouts_json(
        rid: str,
        step: int,
        env: str,
        low: str,
        high: str,
        page_index: int,
        tokens: bool,
        token_start: int,
    ):
        bounds = (number_arg(low, "low"), number_arg(high, "high"))
        return archive.groups_page(
            site.run_of(rid), step, env, *bounds, page_index, tokens, token_start
        )

    def text_page(rid: str, source: str, step: int, row: int, part: str, start: int):
        run = site.run_of(rid)
        return site.page(
            "text.html",
            rid=rid,
            run={"name": run.name},
            text=archive.text_page(run, source, step, row, part, start),
        )

    def text_json(rid: str, source: str, step: int, row: int, part: str, start: int):
        return archive.text_page(site.run_of(rid), source, step, row, part, start)

    page_args = dict(env="", low="", high="", page_index=0, token_start=0)
    app.get("/run/{rid}/rollouts", response_class=HTMLResponse)(
        via(site, rollouts_page, step="", tokens=False, **page_args)
    )
    app.get("/api/run/{rid}/rollouts")(via(site, rollouts_json, tokens=True, **page_args))
    text_args = dict(source="rollouts", start=0)
    app.get("/run/{rid}/text", response_class=HTMLResponse)(via(site, text_page, **text_args))
    app.get("/api/run/{rid}/text")(via(site, text_json, **text_args))


def add_eval_routes(app: FastAPI, site: Site) -> None:
    """A run's evaluations, as a page and as JSON."""

    def evals_page(rid: str, step: int | None, env: str, failed: bool, page_index: int):
        run = site.run_of(rid)
        steps = run.eval_steps()
        samples = None
        if steps:
            chosen = steps[-1] if step is None else step
            samples = archive.eval_samples(run, chosen, env, failed, page_index)
        table = archive.eval_table(run)
        return site.page(
            "evals.html",
            rid=rid,
            run={"name": run.name},
            table=table,
            steps=steps,
            samples=samples,
            env=env,
            failed=failed,
        )

    def evals_json(rid: str, step: int | None, env: str, page_index: int):
        run = site.run_of(rid)
        found: dict[str, object] = {"table": archive.eval_table(run)}
        if step is not None:
            found["samples"] = archive.eval_samples(run, step, env, False, page_index)
        return found

    app.get("/run/{rid}/evals", response_class=HTMLResponse)(
        via(site, evals_page, step=None, env="", failed=False, page_index=0)
    )
    app.get("/api/run/{rid}/evals")(via(site, evals_json, step=None, env="", page_index=0))


def add_compare_routes(app: FastAPI, site: Site) -> None:
    """Two to four runs side by side."""

    def compare_page(runs: str):
        chosen = compared(runs)
        return site.page(
            "compare.html",
            ids=[rid for rid, _ in chosen],
            names=[run.name for _, run in chosen],
            diff=compare.config_diff([run for _, run in chosen]),
            resumes=[compare.resume_note(run) for _, run in chosen],
        )

    def compared(runs: str) -> list[tuple[str, RunData]]:
        ids = [r for r in runs.split(",") if r]
        if not 2 <= len(ids) <= MAX_COMPARED or len(set(ids)) != len(ids):
            raise ViewError(
                400,
                f"compare takes 2 to {MAX_COMPARED} different runs "
                "(?runs=ID,ID), from the runs list",
            )
        return [(rid, site.run_of(rid)) for rid in ids]

    app.get("/compare", response_class=HTMLResponse)(via(site, compare_page, runs=""))


def one_line_path(path: Path) -> str:
    from rlcore.files.readback import shown

    return shown(path)


def warm_up(templates: Environment) -> None:
    """Compile every template, import the archive reader and read one metrics line as columns
    once, at start: a page's first load then costs what reading its run costs."""
    import pyarrow.parquet  # noqa: F401

    add_columns(Curves(), b'{"component": "trainer", "step": 1, "loss": 0.5, "time": 1.0}\n')
    for name in templates.list_templates():
        templates.get_template(name)


def find_at(library: Library, relative: str) -> str:
    try:
        run = library.at(relative)
    except safe.Refused as err:
        raise ViewError(400, f"refused: {err}") from None
    except safe.Missing as err:
        raise ViewError(404, str(err)) from None
    return next(rid for rid, found in library.scan().items() if found is run)


def number_arg(text: str, name: str, kind=float):
    """A form field's number (an empty field is None); a 400 naming the field otherwise."""
    if not text.strip():
        return None
    try:
        value = kind(text)
    except ValueError:
        raise ViewError(400, f"bad request: {name} must be a number, got {text[:40]!r}") from None
    if kind is float and value != value:
        raise ViewError(400, f"bad request: {name} must be a number, got {text[:40]!r}")
    return value


def classify(err: Exception) -> tuple[int, str]:
    if isinstance(err, Damaged):
        return 422, str(err)
    if isinstance(err, safe.Refused):
        return 400, f"refused: {err}"
    if isinstance(err, safe.Missing):
        return 404, str(err)
    if isinstance(err, archive.Unreadable):
        return 422, str(err)
    if isinstance(err, PermissionError):
        return 403, f"cannot read {one_line(err)}"
    if isinstance(err, OSError):
        return 500, f"cannot read {one_line(err)}"
    return 500, f"internal error ({err.__class__.__name__}): {one_line(err)}"


def error_response(request: Request, status: int, message: str, page):
    message = clean_text(message)
    if request.url.path.startswith("/api/"):
        return SafeJSON({"error": message, "status": status}, status_code=status)
    return page("error.html", status=status, status_code=status, message=message)


def number(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)
