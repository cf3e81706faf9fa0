"""Screenshots of `rl view`'s pages for the README: one PNG per page, 1280x800, reduced to a
256-colour palette (a fraction of Chromium's own PNG).

    .venv/bin/python -m benchmarks.view_screenshots outputs/quickstart [--compare outputs/other]
        [--evals outputs/eval-quickstart] [--step N] [--out docs/images]

Starts `rl view` on the run (and the run to compare with), opens each page in headless
Chromium (Debian's `chromium` and `chromium-driver`), waits for its charts or rows, and writes
docs/images/view-{runs,run,rollouts,evals,compare}.png. A page the run has nothing for (no
archived rollouts, no evaluations, nothing to compare with) is skipped and said so.
"""

import argparse
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WIDTH, HEIGHT = 1280, 800
COLOURS = 256


def palette_png(source: Path, out: Path) -> int:
    """`source` (any PNG) rewritten at `out` as an 8-bit palette PNG; returns its bytes."""
    import numpy as np
    from matplotlib import image

    pixels = image.imread(source)[..., :3]
    rgb = np.round(pixels * 255).astype(np.int32) >> 3 << 3  # 5 bits a channel first
    codes = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
    uniques, inverse, counts = np.unique(codes.ravel(), return_inverse=True, return_counts=True)
    keep = uniques[np.argsort(-counts)[:COLOURS]]
    channels = np.stack([(keep >> 16) & 255, (keep >> 8) & 255, keep & 255], axis=1)
    wanted = np.stack([(uniques >> 16) & 255, (uniques >> 8) & 255, uniques & 255], axis=1)
    nearest = np.empty(len(uniques), dtype=np.uint8)
    for start in range(0, len(uniques), 4096):  # nearest palette colour of each unique one
        part = wanted[start : start + 4096, None, :] - channels[None, :, :]
        nearest[start : start + 4096] = np.argmin((part**2).sum(axis=2), axis=1)
    indices = nearest[inverse].reshape(codes.shape)
    rows = b"".join(b"\x00" + row.tobytes() for row in indices)
    height, width = indices.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0)
    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"PLTE", channels.astype(np.uint8).tobytes())
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )
    out.write_bytes(png)
    return len(png)


def shoot(session, url: str, ready: str, out: Path, scratch: Path) -> None:
    from tests.integration.browser import wait_until

    session.get(url)
    wait_until(
        session,
        lambda s: s.execute_script(f"return !!document.querySelector('{ready}')"),
        what=ready,
    )
    time.sleep(1.5)  # charts finish drawing
    raw = scratch / out.name
    session.save_screenshot(str(raw))
    print(f"wrote {out} ({palette_png(raw, out) / 1024:.0f} KiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run folder (e.g. outputs/quickstart)")
    parser.add_argument("--compare", type=Path, help="a second run for the compare page")
    parser.add_argument(
        "--evals",
        type=Path,
        help="an `evals` output folder for the evals page (else the run's own)",
    )
    parser.add_argument(
        "--step", type=int, help="the step the rollouts page shows, tokens shaded (else the last)"
    )
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    args = parser.parse_args()
    from launcher.view.library import run_id
    from tests.integration.browser import start_chromium
    from tests.integration.view_server import ViewServer

    runs = [args.run.resolve(), *([args.compare.resolve()] if args.compare else [])]
    shown = [*runs, *([args.evals.resolve()] if args.evals else [])]
    args.out.mkdir(parents=True, exist_ok=True)
    session = start_chromium(WIDTH, HEIGHT)
    session.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
    )
    with ViewServer(*map(str, shown)) as server, tempfile.TemporaryDirectory() as scratch:
        try:
            rid = run_id(runs[0])
            eid = run_id(shown[-1]) if args.evals else rid
            step = "" if args.step is None else f"?step={args.step}&tokens=true"
            pages = [
                ("runs", "/", "#runs"),
                ("run", f"/run/{rid}", "#panel-0 .main-svg"),
                ("rollouts", f"/run/{rid}/rollouts{step}", "section.group, #no-samples"),
                ("evals", f"/run/{eid}/evals", "article.sample, #no-evals"),
            ]
            if len(runs) == 2:
                compare = f"/compare?runs={rid},{run_id(runs[1])}"
                pages.append(("compare", compare, "#panel-0 .main-svg"))
            else:
                print("no --compare run: view-compare.png skipped")
            for name, path, ready in pages:
                shoot(
                    session, server.base + path, ready, args.out / f"view-{name}.png", Path(scratch)
                )
        finally:
            session.quit()


if __name__ == "__main__":
    main()
