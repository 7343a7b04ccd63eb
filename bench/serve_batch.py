"""Does request batching pay? Ray Serve's `@serve.batch` on the predictor: concurrent forecasts (one history of
8 states each, 8 states out, the shipped weights/predictor) gathered into one forward pass per batch, for each
max_batch_size x batch_wait_timeout_s, beside no batching (max_batch_size 1), in one process one after the other.

  python -m bench.serve_batch                                   # CPU, 1 torch thread, 16 concurrent clients
  python -m bench.serve_batch --device cuda --sizes 1,8,32,64 --waits 0,0.002,0.01 --clients 64

Prints forecasts per second, p50/p99 latency, the mean batch that ran, and throughput as a ratio of no batching.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def make_deployment(size: int, wait: float, weights: Path, device: str, threads: int, horizon: int) -> Any:
    from ray import serve

    @serve.deployment(num_replicas=1, max_ongoing_requests=1024, ray_actor_options={"num_cpus": 1})
    class Forecaster:
        def __init__(self) -> None:
            import torch

            from pipeline.predictor import Predictor

            torch.set_num_threads(threads)
            self.predictor = Predictor.from_pretrained(weights, device=device, domain="shapes")
            self.batches: list[int] = []

        @serve.batch(max_batch_size=size, batch_wait_timeout_s=wait)
        async def forecast(self, histories: list[list[str]]) -> list[list[str]]:
            self.batches.append(len(histories))
            return self.predictor.predict(histories, horizon)  # (B, horizon) states in words

        def mean_batch(self) -> float:
            return statistics.fmean(self.batches) if self.batches else 0.0

    return Forecaster.bind()


def hop_ms(frames: int, side: int, calls: int = 50) -> tuple[float, float]:
    """Median ms of a deployment call carrying nothing, and carrying `frames` RGB frames of side x side (what a
    stage split into its own deployment would pass on per request): the price of one hop between stages."""
    import numpy as np
    from ray import serve

    @serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
    class Stage:
        def take(self, payload: Any) -> int:
            return 0 if payload is None else int(payload.shape[0])

    handle = serve.run(Stage.bind(), name="hop-bench", route_prefix=None)
    batch = np.random.default_rng(0).integers(0, 255, (frames, side, side, 3), dtype=np.uint8)
    times: dict[str, list[float]] = {"empty": [], "frames": []}
    for _ in range(calls):
        for name, payload in (("empty", None), ("frames", batch)):
            t = time.perf_counter()
            handle.take.remote(payload).result()
            times[name].append((time.perf_counter() - t) * 1000)
    serve.delete("hop-bench")
    return statistics.median(times["empty"]), statistics.median(times["frames"])


async def drive(
    handle: Any, histories: list[list[str]], clients: int, seconds: float
) -> tuple[int, list[float]]:
    """`clients` loops, each sending one history at a time until `seconds` have passed."""
    latencies: list[float] = []
    stop_at = time.monotonic() + seconds

    async def client(i: int) -> None:
        while time.monotonic() < stop_at:
            t = time.perf_counter()
            await handle.forecast.remote(histories[i % len(histories)])
            latencies.append(time.perf_counter() - t)
            i += clients

    await asyncio.gather(*(client(i) for i in range(clients)))
    return len(latencies), latencies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", type=Path, default=REPO / "weights" / "predictor", help="predictor folder")
    ap.add_argument("--sizes", default="1,4,8,16", help="max_batch_size values (default 1,4,8,16)")
    ap.add_argument(
        "--waits", default="0,0.005,0.02", help="batch_wait_timeout_s values (default 0,0.005,0.02)"
    )
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    ap.add_argument("--seconds", type=float, default=8.0, help="seconds per setting (default 8)")
    ap.add_argument("--horizon", type=int, default=8, help="states forecast per request (default 8)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the replica (default 1)")
    ap.add_argument("--device", default="cpu", help="torch device (default cpu)")
    args = ap.parse_args()

    import ray
    from ray import serve

    from world import sequences

    histories = [r["states"][:8] for r in sequences("all", 64, seed=7, length=8, split="test")]
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    rows = []
    try:
        empty, full = hop_ms(frames=8, side=210)
        print(f"one hop between deployments: {empty:.1f} ms empty, {full:.1f} ms carrying 8 frames of 210x210 "
              "(a request's 4 clip frames and 4 drawn ones)", flush=True)  # fmt: skip
        for size in (int(x) for x in args.sizes.split(",")):
            for wait in (float(x) for x in args.waits.split(",")):
                if size == 1 and wait > 0:
                    continue  # a batch of one never waits
                app = make_deployment(size, wait, args.weights, args.device, args.threads, args.horizon)
                handle = serve.run(app, name="batch-bench", route_prefix=None)
                asyncio.run(drive(handle, histories, args.clients, 1.0))  # warm up
                n, lat = asyncio.run(drive(handle, histories, args.clients, args.seconds))
                mean_batch = handle.mean_batch.remote().result()
                q = statistics.quantiles(lat, n=100, method="inclusive")
                rows.append((size, wait, n / args.seconds, q[49], q[98], mean_batch))
                print(f"max_batch_size {size:3d}, wait {wait * 1000:4.0f} ms: {n / args.seconds:7.1f} forecasts/s, "
                      f"p50 {q[49] * 1000:6.1f} ms, p99 {q[98] * 1000:6.1f} ms, mean batch {mean_batch:.1f}", flush=True)  # fmt: skip
                serve.delete("batch-bench")
    finally:
        serve.shutdown()
        ray.shutdown()
    base = next(r[2] for r in rows if r[0] == 1)
    print(f"\n{args.clients} concurrent clients, {args.horizon} states out per forecast, {args.device}, "
          f"{args.threads} thread(s)")  # fmt: skip
    print("| max_batch_size | wait ms | forecasts/s | vs no batching | p50 ms | p99 ms | mean batch |")
    print("|---|---|---|---|---|---|---|")
    for size, wait, rate, p50, p99, mean in rows:
        print(f"| {size} | {wait * 1000:g} | {rate:.1f} | {rate / base:.2f}x | {p50 * 1000:.1f} | {p99 * 1000:.1f} "
              f"| {mean:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
