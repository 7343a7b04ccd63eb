"""The service under hostile load (docs/reliability.md): each part starts `semworld serve` on 127.0.0.1
in a subprocess and prints its figures.

  python -m bench.service_hostile schemathesis [--examples 500]     # every operation, all checks
  python -m bench.service_hostile load [--clients 8 --seconds 60]   # /v1/predict, shipped weights
  python -m bench.service_hostile issue                             # two slow requests under a 5 s deadline
  python -m bench.service_hostile upload                            # /health while a 60 MiB job uploads

`schemathesis` runs on the stand-in stages (tests/fakes.py: it tests the HTTP layer, fast); `load` and
`upload` on the shipped weights (weights/) unless --fake. Runs with nice and OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
CLIP = REPO / "tests" / "assets" / "bigbuckbunny_160x90.mp4"
BIN = Path(sys.executable).parent


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    repo = REPO  # the checkout whose server runs (--repo: a baseline checkout, side by side)

    def __init__(self, data: Path, fake: bool, args: tuple[str, ...] = (), **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full = {
            **os.environ, "PYTHONPATH": f"{self.repo}:{REPO}", "OMP_NUM_THREADS": "1", "SEMWORLD_DATA_DIR": str(data),
            "SEMWORLD_SAMPLES_DIR": str(REPO / "tests" / "assets"), **env,
        }  # fmt: skip
        if fake:
            full.setdefault("SEMWORLD_PIPELINE_FACTORY", "tests.fakes:make_pipeline")
        else:
            full.setdefault("SEMWORLD_WEIGHTS_DIR", str(REPO / "weights"))
            full.setdefault("SEMWORLD_DEVICE", "cpu")
        self.log = data / "server.log"
        self.proc = subprocess.Popen(
            ["nice", "-n", "10", sys.executable, "-m", "pipeline.cli", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", "warning", *args],
            cwd=self.repo, env=full, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        atexit.register(self.stop)  # never leave a server behind, whatever the bench raises
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise SystemExit("server not ready in 300 s")

    def rss_mb(self) -> float:
        pid = self.proc.pid
        # `nice` execs python, so the pid is the server's own.
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def metric(self, name: str) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return float(next(x.split()[1] for x in text.splitlines() if x.startswith(name + " ")))

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# ---- schemathesis ----------------------------------------------------------------------------------------------
def run_schemathesis(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), fake=True, SEMWORLD_MAX_SYNC_UPLOAD_MB="0.1", SEMWORLD_MAX_UPLOAD_MB="0.5")
        print(f"load average before: {load_average()}")
        cmd = [str(BIN / "schemathesis"), "run", f"{server.url}/openapi.json", "--checks", "all",
               "-n", str(args.examples), "--seed", str(args.seed), "-w", "1", "--no-color",
               "--request-timeout", "30"]  # fmt: skip
        print("$", " ".join(cmd))
        t0 = time.perf_counter()
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)  # its cache stays out of the tree
        took = time.perf_counter() - t0
        server.stop()
        out = run.stdout + run.stderr
        Path(args.log).resolve().write_text(out)
        cases = re.search(r"(\d+) generated", out)
        print(f"took {took:.0f} s, exit {run.returncode}, load average after: {load_average()}")
        print(f"test cases: {cases.group(1) if cases else '?'} (full output in {args.log})")
        summary = out[out.find("Failures:") :].split("\n\n")[0] if "Failures:" in out else "no failures"
        print(summary)
        print(f"5xx answers (ST101 Server error): {'some, see the log' if 'Server error' in out else 0}")


# ---- load ------------------------------------------------------------------------------------------------------
def step_seconds(url: str, frames: int = 8) -> float:
    """Seconds per denoising step of one batch of `frames` (the heavy requests' batch): the render time of 6 steps
    minus 1 step, over 5 (best of 3 each)."""
    body = {"states": ["red box top right , orange ball top midleft ."], "horizon": frames}
    with httpx.Client(base_url=url, timeout=120) as c:
        times = {}
        for steps in (1, 6):
            runs = [c.post("/v1/rollout", json={**body, "steps": steps}) for _ in range(3)]
            ok = [r.json()["timings"]["render"] for r in runs if r.status_code == 200]
            if not ok:
                raise SystemExit(f"step measurement failed: {runs[-1].status_code} {runs[-1].text[:200]}")
            times[steps] = min(ok)
    return (times[6] - times[1]) / 5


def hammer(url: str, clients: int, seconds: float, make_request) -> tuple[dict[int, int], list[float]]:
    codes: dict[int, int] = {}
    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client() -> None:
        with httpx.Client(base_url=url, timeout=300) as c:
            while time.monotonic() < stop_at:
                t = time.perf_counter()
                try:
                    code = make_request(c).status_code
                except httpx.TransportError:
                    code = -1
                took = time.perf_counter() - t
                with lock:
                    codes[code] = codes.get(code, 0) + 1
                    if code == 200:
                        latencies.append(took)
                if code == 429:
                    time.sleep(0.2)  # keep the pressure on (a polite client would wait Retry-After)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes, latencies


def percentile(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) >= 2 else float("nan")


def run_load(args: argparse.Namespace) -> None:
    """Phase 1: the default request timeout (60 s), ordinary requests. Phase 2: a fresh server with a
    `--timeout` deadline and requests that cannot meet it."""
    clip = CLIP.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        first, second = Path(tmp) / "default", Path(tmp) / "deadline"
        first.mkdir()
        second.mkdir()
        server = Server(first, fake=args.fake, FAKE_STEP_DELAY="0.01")
        print(f"load average before: {load_average()}")
        rss0 = server.rss_mb()

        def predict(c: httpx.Client) -> httpx.Response:
            return c.post("/v1/predict", files={"file": ("c.mp4", clip, "video/mp4")},
                          data={"horizon": "4", "stride": "4"})  # fmt: skip

        codes, lat = hammer(server.url, args.clients, args.seconds, predict)
        rss1 = server.rss_mb()
        print(f"{args.clients} clients x {args.seconds:g} s on /v1/predict (4 frames in, 4 predicted, default steps, "
              "default settings)")  # fmt: skip
        print(f"  answers: {dict(sorted(codes.items()))}")
        print(
            f"  latency of 200s: p50 {percentile(lat, 50):.3f} s, p99 {percentile(lat, 99):.3f} s, n={len(lat)}"
        )
        print(f"  RSS: {rss0:.0f} MB before, {rss1:.0f} MB after")
        print(f"  load average: {load_average()}")
        server.stop()

        server = Server(
            second, fake=args.fake, SEMWORLD_REQUEST_TIMEOUT_S=str(args.timeout), FAKE_STEP_DELAY="0.01"
        )
        step = step_seconds(server.url)

        def heavy(c: httpx.Client) -> httpx.Response:  # past the deadline on purpose: 8 frames x 120 steps
            return c.post("/v1/predict", files={"file": ("c.mp4", clip, "video/mp4")},
                          data={"horizon": "8", "stride": "4", "steps": "120"})  # fmt: skip

        codes, _ = hammer(server.url, args.clients, args.deadline_seconds, heavy)
        overrun = server.metric("semworld_deadline_overrun_max_seconds")
        units = server.metric("semworld_deadline_overrun_max_steps")
        print(
            f"{args.clients} clients x {args.deadline_seconds:g} s of requests past the {args.timeout:g} s deadline"
        )
        print(f"  answers: {dict(sorted(codes.items()))}")
        print(f"  one denoising step of the 8-frame batch: {step * 1000:.1f} ms; longest the model stayed busy past a deadline: "
              f"{overrun * 1000:.1f} ms ({overrun / step:.2f} measured steps); worst overrun in units of the "
              f"step that was running when its deadline passed: {units:.2f}")  # fmt: skip
        print(f"load average after: {load_average()}")
        server.stop()


# ---- two slow requests under a deadline -----------------------------------------------------------------------
def run_issue(args: argparse.Namespace) -> None:
    """Two slow requests (a rendered 64-state rollout, a 300-step predict) with SEMWORLD_REQUEST_TIMEOUT_S=5 (the
    cost bound lifted so they run): when the 504 comes, and when the model is free again (a one-step rollout sent right after the 504 returns)."""
    clip = CLIP.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), fake=args.fake, SEMWORLD_REQUEST_TIMEOUT_S="5", SEMWORLD_MAX_SYNC_COST="1000000",
                        FAKE_STEP_DELAY="0.05")  # fmt: skip
        print(f"load average before: {load_average()}")
        with httpx.Client(base_url=server.url, timeout=300) as c:
            requests = {
                "rollout 64 states, horizon 1, steps 40, render_context 64": lambda: c.post(
                    "/v1/rollout",
                    json={"states": ["red box top right , orange ball top midleft ."] * 64, "horizon": 1,
                          "steps": 40, "render": True, "render_context": 64},
                ),
                "predict steps 300, horizon 8": lambda: c.post(
                    "/v1/predict", files={"file": ("c.mp4", clip, "video/mp4")},
                    data={"horizon": "8", "steps": "300", "stride": "4"},
                ),
            }  # fmt: skip
            for name, send in requests.items():
                t0 = time.perf_counter()
                r = send()
                answered = time.perf_counter() - t0
                free = c.post("/v1/rollout", json={"states": ["a red ball ."], "horizon": 1, "steps": 1})
                freed = time.perf_counter() - t0
                print(f"{name}: {r.status_code} at {answered:.2f} s; the next request answered "
                      f"({free.status_code}) at {freed:.2f} s")  # fmt: skip
        print(
            f"longest past a deadline: {server.metric('semworld_deadline_overrun_max_seconds') * 1000:.0f} ms, "
            f"{server.metric('semworld_deadline_overrun_max_steps'):.2f} of the step then running"
        )
        print(f"load average after: {load_average()}")
        server.stop()


# ---- upload ----------------------------------------------------------------------------------------------------
def run_upload(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.mp4"
        big.write_bytes(os.urandom(60 * 2**20))
        server = Server(Path(tmp), fake=True, SEMWORLD_MAX_UPLOAD_MB="64")
        print(f"load average before: {load_average()}")
        with httpx.Client(base_url=server.url, timeout=30) as c:

            def health_times(until: threading.Event | None, n: int = 200) -> list[float]:
                out = []
                while (until is None and len(out) < n) or (until is not None and not until.is_set()):
                    t = time.perf_counter()
                    c.get("/health")
                    out.append(time.perf_counter() - t)
                    time.sleep(0.005)
                return out

            idle = health_times(None)
            done = threading.Event()
            codes = []

            def upload() -> None:  # curl in its own process: the client's own work never slows the probe
                for _ in range(args.uploads):
                    run = subprocess.run(
                        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-F", f"file=@{big};type=video/mp4",
                         "-F", "stride=8", f"{server.url}/v1/jobs"],
                        capture_output=True, text=True,
                    )  # fmt: skip
                    codes.append(int(run.stdout or 0))
                done.set()

            t = threading.Thread(target=upload)
            t.start()
            busy = health_times(done)
            t.join()
        server.stop()
        print(f"/health idle: p50 {statistics.median(idle) * 1000:.1f} ms, max {max(idle) * 1000:.1f} ms")
        print(f"/health during {args.uploads} x 60 MiB job uploads (answers {codes}): p50 "
              f"{statistics.median(busy) * 1000:.1f} ms, p99 {percentile(busy, 99) * 1000:.1f} ms, "
              f"max {max(busy) * 1000:.1f} ms, n={len(busy)}")  # fmt: skip
        print(f"load average after: {load_average()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="part", required=True)
    s = sub.add_parser("schemathesis")
    s.add_argument("--examples", type=int, default=500, help="schemathesis -n (per operation and phase)")
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--log", default="runs/schemathesis.log")
    s.set_defaults(func=run_schemathesis)
    ld = sub.add_parser("load")
    ld.add_argument("--clients", type=int, default=8)
    ld.add_argument("--seconds", type=float, default=60)
    ld.add_argument("--deadline-seconds", type=float, default=20)
    ld.add_argument("--timeout", type=float, default=2.0, help="SEMWORLD_REQUEST_TIMEOUT_S")
    ld.add_argument("--fake", action="store_true", help="stand-in stages instead of the shipped weights")
    ld.set_defaults(func=run_load)
    i = sub.add_parser("issue")
    i.add_argument("--fake", action="store_true", help="stand-in stages (50 ms steps) instead of the weights")
    i.set_defaults(func=run_issue)
    u = sub.add_parser("upload")
    u.add_argument("--uploads", type=int, default=3)
    u.add_argument("--repo", type=Path, default=None, help="run the server of this checkout (a baseline)")
    u.set_defaults(func=run_upload)
    args = p.parse_args()
    if getattr(args, "repo", None) is not None:
        Server.repo = args.repo.resolve()
    Path("runs").mkdir(exist_ok=True)
    args.func(args)


if __name__ == "__main__":
    main()
