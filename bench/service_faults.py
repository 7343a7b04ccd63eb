"""Faults under load for the scaled-out service: `semworld serve --ray --replicas 2` with its jobs in a
throwaway PostgreSQL (Debian's initdb, a unix socket), the stand-in stages of tests/fakes.py (0.4 s a job), and
client threads that keep submitting jobs and following them while the fault happens.

  python -m bench.service_faults pg-restart      # PostgreSQL stopped for --outage seconds, then started again
  python -m bench.service_faults kill-replica    # kill -9 the replica running a job

Prints every answer by status code (a 503 must say so in JSON; anything else is a bug), how long the service
took to answer again, and what became of every accepted job (succeeded once, run again, failed or lost).
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.service_hostile import CLIP, Server, load_average


class Load:
    """Client threads that submit a job, follow it to its end, and submit the next, recording every answer."""

    def __init__(self, url: str, clients: int) -> None:
        self.url, self.clients = url, clients
        self.codes: collections.Counter[int] = collections.Counter()
        self.bad: list[str] = []  # answers that are neither 2xx/404 nor a JSON 503
        self.accepted: list[str] = []
        self.first_503: float | None = None
        self.last_503: float | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]

    def _note(self, r: httpx.Response | None, error: str | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            code = -1 if r is None else r.status_code
            self.codes[code] += 1
            if code == 503:
                self.first_503 = self.first_503 or now
                self.last_503 = now
                if r is not None and "detail" not in r.json():
                    self.bad.append(f"503 without detail: {r.text[:120]}")
            elif r is None or code >= 400 and code != 404:
                self.bad.append(error or f"{code}: {r.text[:160] if r is not None else ''}")

    def _client(self) -> None:
        clip = CLIP.read_bytes()
        with httpx.Client(base_url=self.url, timeout=30) as c:
            while not self._stop.is_set():
                try:
                    r = c.post("/v1/jobs", files={"file": ("c.mp4", clip, "video/mp4")},
                               data={"horizon": "4", "stride": "4"})  # fmt: skip
                except httpx.TransportError as err:
                    self._note(None, f"transport: {err!r}")
                    time.sleep(0.2)
                    continue
                self._note(r)
                if r.status_code != 202:
                    time.sleep(0.2)
                    continue
                job = r.json()["id"]
                with self._lock:
                    self.accepted.append(job)
                while not self._stop.is_set():
                    try:
                        s = c.get(f"/v1/jobs/{job}")
                    except httpx.TransportError as err:
                        self._note(None, f"transport: {err!r}")
                        time.sleep(0.2)
                        continue
                    self._note(s)
                    if s.status_code == 200 and s.json()["state"] in ("succeeded", "failed", "canceled"):
                        break
                    time.sleep(0.1)

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)


def settle(url: str, jobs: list[str], timeout: float = 120) -> dict[str, dict[str, Any]]:
    """Wait for every accepted job to end; their final records."""
    deadline = time.monotonic() + timeout
    final: dict[str, dict[str, Any]] = {}
    with httpx.Client(base_url=url, timeout=30) as c:
        while time.monotonic() < deadline and len(final) < len(jobs):
            for job in jobs:
                if job in final:
                    continue
                r = c.get(f"/v1/jobs/{job}")
                if r.status_code == 200 and r.json()["state"] in ("succeeded", "failed", "canceled"):
                    final[job] = r.json()
                elif r.status_code == 404:
                    final[job] = {"state": "lost", "attempts": 0}
            time.sleep(0.3)
    return final


def report(load: Load, final: dict[str, dict[str, Any]], fault_at: float, back_at: float) -> None:
    print(f"answers by status: {dict(sorted(load.codes.items()))}")
    print(f"answers that are neither 2xx/404 nor a JSON 503: {len(load.bad)} {load.bad[:3]}")
    if load.first_503 is not None and load.last_503 is not None:
        print(f"503s from {load.first_503 - fault_at:+.1f} s to {load.last_503 - fault_at:+.1f} s after the fault "
              f"(the fault lasted {back_at - fault_at:.1f} s; the last 503 came {load.last_503 - back_at:+.1f} s "
              "after it ended)")  # fmt: skip
    states = collections.Counter(j["state"] for j in final.values())
    attempts = collections.Counter(j.get("attempts", 0) for j in final.values() if j["state"] == "succeeded")
    unsettled = len(load.accepted) - len(final)
    print(f"accepted jobs: {len(load.accepted)}; ended {dict(states)}; succeeded after n runs: {dict(attempts)}; "
          f"not ended in time: {unsettled}")  # fmt: skip
    print(f"load average: {load_average()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fault", choices=("pg-restart", "kill-replica"))
    ap.add_argument("--clients", type=int, default=4, help="client threads (default 4)")
    ap.add_argument("--before", type=float, default=6.0, help="seconds of load before the fault (default 6)")
    ap.add_argument("--after", type=float, default=10.0, help="seconds of load after it (default 10)")
    ap.add_argument(
        "--outage", type=float, default=5.0, help="pg-restart: seconds PostgreSQL is down (default 5)"
    )
    args = ap.parse_args()

    from tests.pg import start_cluster  # the tests' throwaway cluster (it raises Skipped where there is none)

    cluster = start_cluster()
    try:
        url = cluster.url(cluster.create_database())
        with tempfile.TemporaryDirectory() as tmp:
            env = {"SEMWORLD_DATABASE_URL": url, "SEMWORLD_JOB_LEASE_S": "3", "SEMWORLD_JOB_HEARTBEAT_S": "0.5",
                   "FAKE_RENDER_DELAY": "0.4", "SEMWORLD_RAY_NUM_CPUS": "0.5", "SEMWORLD_RAY_LOCAL_CPUS": "2",
                   "SEMWORLD_MAX_QUEUE": "64"}  # fmt: skip
            server = Server(Path(tmp), fake=True, args=("--ray", "--replicas", "2"), **env)
            load = Load(server.url, args.clients)
            load.start()
            time.sleep(args.before)
            fault_at = time.monotonic()
            if args.fault == "pg-restart":
                cluster.stop("fast")
                time.sleep(args.outage)
                cluster.start()
                print(f"PostgreSQL stopped (fast) for {args.outage:g} s, then started")
            else:
                from sqlalchemy import create_engine, text

                engine = create_engine(url)
                deadline = time.monotonic() + 10
                owner = None
                while owner is None and time.monotonic() < deadline:
                    with engine.connect() as db:
                        owner = db.execute(
                            text("SELECT owner FROM jobs WHERE state = 'running' LIMIT 1")
                        ).scalar()
                    time.sleep(0.05)
                engine.dispose()
                if owner is None:
                    raise SystemExit("no running job to kill the replica of")
                os.kill(int(owner.split("-")[-2]), signal.SIGKILL)  # owner: host-pid-random
                print(f"killed replica pid {owner.split('-')[-2]} (kill -9) while it ran a job")
            back_at = time.monotonic()
            time.sleep(args.after)
            load.stop()
            final = settle(server.url, list(load.accepted))
            report(load, final, fault_at, back_at)
            server.stop()
    finally:
        if cluster.running():
            cluster.stop("immediate")


if __name__ == "__main__":
    main()
