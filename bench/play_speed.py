"""The page's play mode, timed as a person plays it: `semworld serve` on a game's weights, Debian's Chromium on the
page, a sample clip read and forecast, then key presses in play mode; the time from each key press to its drawn
frame on screen (the page's own measurement: fetch, the one-step /v1/rollout, PNG decode), and the service's own
share of it (the rollout's `timings.total`).

    .venv/bin/python -m bench.play_speed                      # weights/pong, 40 presses, 2 threads
    .venv/bin/python -m bench.play_speed --presses 80 --threads 1 --out runs/bench/play.json
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.record import write_record

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(weights: Path, samples: Path, threads: int, log: Path) -> tuple[subprocess.Popen, str]:
    """`semworld serve` on `weights` with `samples` as the page's clips; returns once /ready says yes."""
    port = free_port()
    env = {**os.environ, "SEMWORLD_WEIGHTS_DIR": str(weights), "SEMWORLD_SAMPLES_DIR": str(samples),
           "SEMWORLD_DATA_DIR": str(samples.parent / "data"), "OMP_NUM_THREADS": str(threads)}  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "serve", "--host", "127.0.0.1", "--port",
                             str(port), "--threads", str(threads), "--log-level", "warning"],
                            cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server was not ready in 2 minutes")


def start_play(page, url: str, sample: str) -> None:  # page: playwright.sync_api.Page
    """On the page at `url`: read and forecast the sample clip `sample`, then enter play mode from its last state."""
    page.goto(url + "/")
    page.wait_for_selector(f"#sample option[value='/v1/samples/{sample}']", state="attached")
    page.select_option("#sample", f"/v1/samples/{sample}")
    page.fill("#horizon", "2")
    page.click("#predict-btn")
    page.wait_for_selector("#play-offer:not([hidden])")
    page.click("#play-btn")


def main() -> None:
    from playwright.sync_api import sync_playwright

    from pipeline.domain import get_domain
    from pipeline.video import write_samples

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", type=Path, default=REPO / "weights" / "pong")
    ap.add_argument("--domain", default="pong")
    ap.add_argument("--presses", type=int, default=40, help="key presses timed (default %(default)s)")
    ap.add_argument("--threads", type=int, default=2, help="the server's torch threads (default %(default)s)")
    ap.add_argument("--screenshot", type=Path, default=None, help="save the play panel here (PNG)")
    ap.add_argument("--out", type=Path, default=None, help="also write the numbers as one JSON file here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="semworld-play-") as tmp:
        (sample,) = write_samples(Path(tmp) / "samples", get_domain(args.domain))[:1]
        proc, url = serve(args.weights, Path(tmp) / "samples", args.threads, Path(tmp) / "server.log")
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.set_default_timeout(120_000)
                start_play(page, url, sample.name)
                # the service's own time per step, from the responses the page receives
                served: list[float] = []
                page.on("response", lambda r: served.append(r.json()["timings"]["total"] * 1000)
                        if r.url.endswith("/v1/rollout") and r.ok else None)  # fmt: skip
                for i in range(args.presses):
                    page.keyboard.press("ArrowUp" if (i // 5) % 2 else "ArrowDown")
                    page.wait_for_function(f"document.querySelectorAll('#play-log li').length > {i}")
                key_to_frame = page.evaluate("() => play.latencies")
                if args.screenshot:
                    args.screenshot.parent.mkdir(parents=True, exist_ok=True)
                    page.locator("#play").screenshot(path=str(args.screenshot))
                browser.close()
        finally:
            proc.kill()
    numbers = {
        "presses": len(key_to_frame),
        "key_to_frame_ms": {
            "median": round(statistics.median(key_to_frame), 1),
            "p90": round(sorted(key_to_frame)[int(0.9 * (len(key_to_frame) - 1))], 1),
            "max": round(max(key_to_frame), 1),
        },  # fmt: skip
        "service_ms": {"median": round(statistics.median(served), 1)} if served else None,
        "threads": args.threads,
    }
    print(numbers)
    if args.out:
        write_record(args.out, args, **numbers)


if __name__ == "__main__":
    main()
