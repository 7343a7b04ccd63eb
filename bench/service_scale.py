"""POST /v1/predict under 1, 4 and 16 concurrent clients: the plain server (`semworld serve`, one process) beside
Ray Serve with 1 and 2 replicas (`semworld serve --ray --replicas N`), one after the other on this machine, each
on the shipped weights (or the stand-in stages with --fake). Prints throughput, p50 and p99 latency per engine and
client count, and each engine's throughput as a ratio of the plain server's.

  python -m bench.service_scale                                   # CPU: 1 thread per replica, 20 s per level
  python -m bench.service_scale --device cuda --threads 4 --ray-gpus 1 --engines plain,ray1
  python -m bench.service_scale --fake --seconds 5                # the HTTP layers alone

Every server gets SEMWORLD_MAX_SYNC_WAITING=64, so 16 clients queue instead of meeting 429s: what is measured is
how fast the engines drain a queue. On a GPU box give each replica a GPU (--ray-gpus 1) and as many replicas as
GPUs; on CPU, replicas share the cores.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx

from bench.service_hostile import CLIP, Server, hammer, load_average, percentile

ENGINES = {"plain": (), "ray1": ("--ray", "--replicas", "1"), "ray2": ("--ray", "--replicas", "2")}


def measure(engine: str, args: argparse.Namespace, folder: Path) -> list[dict]:
    env = {
        "SEMWORLD_MAX_SYNC_WAITING": "64",
        "SEMWORLD_THREADS": str(args.threads),
        "SEMWORLD_DEVICE": args.device,
        "SEMWORLD_RAY_NUM_CPUS": str(args.ray_cpus),
        "SEMWORLD_RAY_NUM_GPUS": str(args.ray_gpus),
        "SEMWORLD_RAY_MAX_ONGOING_REQUESTS": "64",
        "FAKE_STEP_DELAY": "0.01",
    }
    folder.mkdir()
    t = time.perf_counter()
    server = Server(folder, fake=args.fake, args=ENGINES[engine], **env)
    started = time.perf_counter() - t
    clip = CLIP.read_bytes()

    def predict(c: httpx.Client) -> httpx.Response:
        return c.post("/v1/predict", files={"file": ("c.mp4", clip, "video/mp4")},
                      data={"horizon": str(args.horizon), "stride": "4"})  # fmt: skip

    hammer(server.url, 2, 3, predict)  # warm every replica's caches
    rows = []
    for clients in args.clients:
        codes, lat = hammer(server.url, clients, args.seconds, predict)
        rows.append({
            "engine": engine, "clients": clients, "ok": codes.get(200, 0), "codes": codes,
            "throughput": codes.get(200, 0) / args.seconds, "p50": percentile(lat, 50), "p99": percentile(lat, 99),
            "ready_s": started,
        })  # fmt: skip
        r = rows[-1]
        print(f"{engine:6s} {clients:3d} clients: {r['throughput']:.2f} req/s, p50 {r['p50']:.2f} s, "
              f"p99 {r['p99']:.2f} s, answers {dict(sorted(codes.items()))} (load {load_average()})", flush=True)  # fmt: skip
    server.stop()
    return rows


def plot(rows: list[dict], path: Path) -> None:
    """Requests per second, and p50/p99 latency, by concurrent clients, one line per engine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {"plain": "plain server", "ray1": "Ray Serve, 1 replica", "ray2": "Ray Serve, 2 replicas"}
    fig, (rate, latency) = plt.subplots(1, 2, figsize=(9, 3.4))
    for engine, label in names.items():
        rs = [r for r in rows if r["engine"] == engine]
        if not rs:
            continue
        clients = [r["clients"] for r in rs]
        rate.plot(clients, [r["throughput"] for r in rs], marker="o", label=label)
        (line,) = latency.plot(clients, [r["p50"] for r in rs], marker="o", label=f"{label} p50")
        latency.plot(clients, [r["p99"] for r in rs], marker="x", linestyle=":", color=line.get_color(),
                     label=f"{label} p99")  # fmt: skip
    for ax in (rate, latency):
        ax.set_xscale("log", base=2)
        ax.set_xticks(
            sorted({r["clients"] for r in rows}), [str(c) for c in sorted({r["clients"] for r in rows})]
        )
        ax.set_xlabel("concurrent clients")
        ax.set_ylim(0, None)
    rate.set_ylabel("requests / s")
    rate.set_title("POST /v1/predict throughput")
    latency.set_ylabel("latency, s")
    latency.set_title("latency")
    rate.legend(fontsize=8)
    latency.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="plain,ray1,ray2", help="comma-separated: plain, ray1, ray2")
    ap.add_argument("--clients", default="1,4,16", help="concurrent clients per level (default 1,4,16)")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds per level (default 20)")
    ap.add_argument("--horizon", type=int, default=4, help="predicted states per request (default 4)")
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads per server process/replica (default 1)"
    )
    ap.add_argument("--device", default="cpu", help="torch device of every replica (default cpu)")
    ap.add_argument("--ray-cpus", type=float, default=1.0, help="CPUs Ray reserves per replica (default 1)")
    ap.add_argument("--ray-gpus", type=float, default=0.0, help="GPUs Ray reserves per replica (default 0)")
    ap.add_argument("--fake", action="store_true", help="the stand-in stages of tests/fakes.py")
    ap.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    ap.add_argument("--figure", type=Path, default=None, help="also plot the rows to this PNG")
    ap.add_argument("--replot", type=Path, default=None, help="plot the rows of this --out JSON; run nothing")
    args = ap.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    if args.replot is not None:
        plot(json.loads(args.replot.read_text()), args.figure or args.replot.with_suffix(".png"))
        return
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for engine in args.engines.split(","):
            rows += measure(engine, args, Path(tmp) / engine)
    base = {r["clients"]: r["throughput"] for r in rows if r["engine"] == "plain"}
    print("\n| engine | clients | requests/s | vs plain | p50 s | p99 s | answers |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['throughput'] / base[r['clients']]:.2f}x" if base.get(r["clients"]) else "-"
        print(f"| {r['engine']} | {r['clients']} | {r['throughput']:.2f} | {ratio} | {r['p50']:.2f} | {r['p99']:.2f} "
              f"| {dict(sorted(r['codes'].items()))} |")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    if args.figure:
        plot(rows, args.figure)


if __name__ == "__main__":
    main()
