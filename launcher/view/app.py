"""The routes of `rl view`. Pages are Jinja2 templates (templates/), curves are drawn in the
browser by Plotly.js from JSON routes under /api/ that the pages poll, and static files come
from a fixed list (static/ and the plotly wheel's own plotly.min.js). A run is named by the id
the server gave it (launcher.view.library), steps and pages by integers; any other input is
checked by launcher.view.safe. Errors are a page (or JSON under /api/) with their status."""

import importlib.util
import sys
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.exceptions import HTTPException

from launcher.view import archive, compare, safe
from launcher.view.curves import Curves, add_columns, panels
from launcher.view.data import RunData
from launcher.view.guard import Guard
from launcher.view.library import Library

HERE = Path(__file__).parent
MAX_COMPARED = 4
POLL_MS = 2000


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
    files."""

    def __init__(self, library: Library):
        self.library = library
        self.templates = Environment(loader=FileSystemLoader(HERE / "templates"),
                                     autoescape=select_autoescape(["html"]))  # fmt: skip
        self.templates.filters["num"] = number
        self.static = {**STATIC, "plotly.min.js": plotly_js()}
        warm_up(self.templates)

    def page(self, name: str, status: int = 200, **context) -> HTMLResponse:
        html = self.templates.get_template(name).render(poll_ms=POLL_MS, **context)
        return HTMLResponse(html, status_code=status)

    def run_of(self, rid: str) -> RunData:
        run = self.library.get(rid)
        if run is None:
            raise ViewError(404, f"no run with id {rid!r} (the runs list names every run found)")
        return run


def make_app(library: Library, token: str | None = None, loopback: bool = True) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(Guard, token=token, loopback=loopback)
    site = Site(library)
    for add in (add_error_handlers, add_list_routes, add_run_routes, add_sample_routes,
                add_compare_routes):  # fmt: skip
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

    for kind in (safe.Refused, safe.Missing, archive.Unreadable, OSError):
        app.add_exception_handler(kind, known_error)

    @app.exception_handler(Exception)
    async def any_error(request: Request, err: Exception):
        # A page saying what failed; the server's own log keeps the traceback.
        print(f"rl view: {request.url.path}: {err.__class__.__name__}: {err}", file=sys.stderr)
        return error_response(request, *classify(err), site.page)


def add_list_routes(app: FastAPI, site: Site) -> None:
    """The static files, the runs list and a run by its relative path."""

    @app.get("/static/{name}")
    def static_file(name: str):
        if name not in site.static:
            raise ViewError(404, f"no static file {name!r}")
        return FileResponse(site.static[name], headers={"Cache-Control": "max-age=3600"})

    @app.get("/", response_class=HTMLResponse)
    def runs_page():
        return site.page("runs.html", runs=runs_json(), folders=site.library.folders)

    @app.get("/api/runs")
    def runs_json():
        return [dict(id=rid, **run.summary(brief=True)) for rid, run in sorted(
            site.library.rescan().items(), key=lambda item: item[1].name)]  # fmt: skip

    @app.get("/at/{relative:path}")
    def run_at(relative: str):
        return RedirectResponse(f"/run/{find_at(site.library, relative)}", status_code=303)


def add_run_routes(app: FastAPI, site: Site) -> None:
    """One run's page and the JSON it polls."""

    @app.get("/run/{rid}", response_class=HTMLResponse)
    def run_page(rid: str):
        run = site.run_of(rid)
        summary = run.summary(disk=False)
        return site.page("run.html", rid=rid, run=summary, configs=run.config_texts(),
                         checkpoints=run.checkpoints(), logs=run.log_tails(), waits=run.waits(),
                         restarts=run.restarts(), has_samples=bool(run.names(archive.SAMPLES)),
                         has_evals=bool(run.eval_steps()))  # fmt: skip

    @app.get("/api/run/{rid}/curves")
    def curves_json(rid: str, key: str = "", points: int = 600):
        run = site.run_of(rid)
        curves = run.curves()
        version = "-".join(map(str, curves.key))
        if key and key == version:
            return {"key": version, "unchanged": True}
        limit = min(max(points, 10), 5000)
        found = {"key": version, "panels": panels(curves, limit), "markers": curves.markers,
                 "sampled": curves.sampled,
                 "summary": run.summary(disk=False), "waits": run.waits()}  # fmt: skip
        return JSONResponse(found)  # json.dumps at once: FastAPI's encoder walks every number

    @app.get("/api/run/{rid}/logs")
    def logs_json(rid: str, lines: int = 40):
        return {name: tail for name, tail in site.run_of(rid).log_tails(min(max(lines, 1), 500))}


def add_sample_routes(app: FastAPI, site: Site) -> None:
    """A run's rollouts and evaluations, as pages and as JSON."""

    @app.get("/run/{rid}/rollouts", response_class=HTMLResponse)
    def rollouts_page(rid: str, step: str = "", env: str = "", low: str = "", high: str = "",
                      page_index: int = 0, tokens: bool = False):  # fmt: skip
        run = site.run_of(rid)
        steps = archive.sample_steps(run)
        view, bounds = None, (number_arg(low, "low"), number_arg(high, "high"))
        if steps:
            chosen = steps[-1] if not step.strip() else int(number_arg(step, "step", int))
            view = archive.groups_page(run, chosen, env, *bounds, page_index, tokens)
        return site.page("rollouts.html", rid=rid, run={"name": run.name}, steps=steps, view=view,
                         env=env, low=bounds[0], high=bounds[1], tokens=tokens)  # fmt: skip

    @app.get("/api/run/{rid}/rollouts")
    def rollouts_json(rid: str, step: int, env: str = "", low: str = "", high: str = "",
                      page_index: int = 0, tokens: bool = True):  # fmt: skip
        bounds = (number_arg(low, "low"), number_arg(high, "high"))
        return archive.groups_page(site.run_of(rid), step, env, *bounds, page_index, tokens)

    @app.get("/run/{rid}/evals", response_class=HTMLResponse)
    def evals_page(rid: str, step: int | None = None, env: str = "", failed: bool = False,
                   page_index: int = 0):  # fmt: skip
        run = site.run_of(rid)
        steps = run.eval_steps()
        samples = None
        if steps:
            chosen = steps[-1] if step is None else step
            samples = archive.eval_samples(run, chosen, env, failed, page_index)
        table = archive.eval_table(run)
        return site.page("evals.html", rid=rid, run={"name": run.name}, table=table,
                         steps=steps, samples=samples, env=env, failed=failed)  # fmt: skip

    @app.get("/api/run/{rid}/evals")
    def evals_json(rid: str, step: int | None = None, env: str = "", page_index: int = 0):
        run = site.run_of(rid)
        found = {"table": archive.eval_table(run)}
        if step is not None:
            found["samples"] = archive.eval_samples(run, step, env, False, page_index)
        return found


def add_compare_routes(app: FastAPI, site: Site) -> None:
    """Two to four runs side by side."""

    @app.get("/compare", response_class=HTMLResponse)
    def compare_page(runs: str = ""):
        chosen = compared(runs)
        return site.page("compare.html", ids=[rid for rid, _ in chosen],
                         names=[run.name for _, run in chosen],
                         diff=compare.config_diff([run for _, run in chosen]),
                         resumes=[compare.resume_note(run) for _, run in chosen])  # fmt: skip

    def compared(runs: str) -> list[tuple[str, RunData]]:
        ids = [r for r in runs.split(",") if r]
        if not 2 <= len(ids) <= MAX_COMPARED or len(set(ids)) != len(ids):
            raise ViewError(400, f"compare takes 2 to {MAX_COMPARED} different runs "
                                 "(?runs=ID,ID), from the runs list")  # fmt: skip
        return [(rid, site.run_of(rid)) for rid in ids]


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
    if isinstance(err, safe.Refused):
        return 400, f"refused: {err}"
    if isinstance(err, safe.Missing):
        return 404, str(err)
    if isinstance(err, archive.Unreadable):
        return 422, str(err)
    if isinstance(err, PermissionError):
        return 403, f"cannot read {err.filename}: permission denied"
    if isinstance(err, OSError):
        return 500, f"cannot read {err.filename or 'a file'}: {err.strerror or err}"
    return 500, f"internal error ({err.__class__.__name__}): {err}"


def error_response(request: Request, status: int, message: str, page):
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message, "status": status}, status_code=status)
    return page("error.html", status=status, status_code=status, message=message)


def number(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)
