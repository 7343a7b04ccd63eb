"""Torch CPU threads against a busy machine: the warm pipeline's latency on a real clip (the tests/assets excerpt,
read at the weights' state rate, 8 predicted frames) with 1, 2, ... threads, on an idle machine and with N
busy-loop processes beside it (another job on the box), interleaved round by round in one process.

Each setting runs in a fresh subprocess (torch's thread pools are fixed once started), `--repeats` calls after a
warm-up call; the report is the median seconds per call and its ratio to 1 thread under the same load.

    .venv/bin/python -m bench.threads                      # threads 1 and all cores; 0, 1 and 2 busy loops
    .venv/bin/python -m bench.threads --threads 1,2 --busy 0,2 --repeats 5 --json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLIP = REPO / "tests" / "assets" / "bigbuckbunny_160x90.mp4"


def busy_loop(stop: float) -> None:
    while time.time() < stop:
        pass


def one_setting(threads: int, repeats: int, weights: str, env: dict[str, str] | None = None) -> list[float]:
    """Seconds per warm call with `threads` torch threads (run in its own interpreter)."""
    code = (
        "import json, sys, time, torch\n"
        f"torch.set_num_threads({threads})\n"
        "from pipeline.world_model import WorldModelPipeline\n"
        f"pipe = WorldModelPipeline.from_pretrained({weights!r}, device='cpu')\n"
        f"clip = {str(CLIP)!r}\n"
        "pipe(clip, horizon=8, seed=0)\n"
        "out = []\n"
        f"for _ in range({repeats}):\n"
        "    t = time.perf_counter(); pipe(clip, horizon=8, seed=0); out.append(time.perf_counter() - t)\n"
        "print(json.dumps(out))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--threads", default=f"1,{os.cpu_count() or 1}", help="torch threads to try, comma-separated"
    )
    p.add_argument("--busy", default="0,1,2", help="busy-loop processes beside the pipeline, comma-separated")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--weights", default=str(REPO / "weights"))
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the pipeline's process (e.g. OMP_WAIT_POLICY=PASSIVE)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    threads = sorted({int(t) for t in args.threads.split(",")})
    busy = [int(b) for b in args.busy.split(",")]
    rows = []
    for n_busy in busy:
        hogs = [mp.Process(target=busy_loop, args=(time.time() + 3600,), daemon=True) for _ in range(n_busy)]
        for h in hogs:
            h.start()
        try:
            env = dict(item.split("=", 1) for item in args.env)
            medians = {t: statistics.median(one_setting(t, args.repeats, args.weights, env)) for t in threads}
        finally:
            for h in hogs:
                h.terminate()
        base = medians[threads[0]]
        for t in threads:
            rows.append({"busy": n_busy, "threads": t, "seconds": round(medians[t], 4),
                         "vs_first": round(medians[t] / base, 2)})  # fmt: skip
    if args.json:
        print(json.dumps({"cores": os.cpu_count(), "rows": rows}, indent=2))
        return
    print(f"{os.cpu_count()} cores; median seconds per warm call (tests/assets clip, 8 predicted frames)")
    print(f"{'busy loops':>10s} {'threads':>8s} {'seconds':>8s} {'x vs ' + str(threads[0]) + ' thr':>10s}")
    for r in rows:
        print(f"{r['busy']:>10d} {r['threads']:>8d} {r['seconds']:>8.3f} {r['vs_first']:>10.2f}")


if __name__ == "__main__":
    main()
