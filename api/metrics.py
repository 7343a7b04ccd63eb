"""Prometheus metrics of the service: per-stage latency, predictions, queue depth and jobs by state.

Request latency comes from prometheus-fastapi-instrumentator; everything lives in one registry per app, so
several apps in one process (tests) do not collide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

STAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class _JobsCollector(Collector):
    """Reads the job store at scrape time, so the numbers are right after a restart too."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self._counts()
        by_state = GaugeMetricFamily("semworld_jobs", "Jobs in the store, by state", labels=["state"])
        for state, n in sorted(counts.items()):
            by_state.add_metric([state], n)
        yield by_state
        yield GaugeMetricFamily("semworld_queue_depth", "Jobs waiting to run", value=counts.get("queued", 0))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.stage_seconds = Histogram(
            "semworld_stage_seconds",
            "Seconds spent per pipeline stage (decode, caption, predict, render, encode, total)",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.predictions = Counter(
            "semworld_predictions",
            "Pipeline runs by entry point and outcome",
            ["entry", "outcome"],
            registry=self.registry,
        )

    def watch_jobs(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self.registry.register(_JobsCollector(counts))

    def observe_timings(self, timings: Mapping[str, float]) -> None:
        for stage, seconds in timings.items():
            self.stage_seconds.labels(stage).observe(seconds)
