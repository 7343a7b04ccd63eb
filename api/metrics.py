"""Prometheus metrics of the service: per-stage latency, predictions, queue depth, jobs by state, the disk used by
job files, how long the model stayed busy past synchronous deadlines, and GPU memory when the models are on CUDA.

Request latency comes from prometheus-fastapi-instrumentator; everything lives in one registry per app, so
several apps in one process (tests) do not collide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

STAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
OVERRUN_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


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


class _GpuMemoryCollector(Collector):
    """torch.cuda's memory counters per GPU, read at scrape time; nothing until this process has used CUDA (a
    scrape never creates a CUDA context of its own)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        import torch

        if not torch.cuda.is_initialized():
            return
        names = {
            "allocated": ("semworld_gpu_memory_allocated_bytes", "GPU memory held by tensors",
                          torch.cuda.memory_allocated),
            "reserved": ("semworld_gpu_memory_reserved_bytes", "GPU memory reserved by the caching allocator",
                         torch.cuda.memory_reserved),
            "peak": ("semworld_gpu_memory_peak_allocated_bytes", "Most GPU memory held by tensors since start",
                     torch.cuda.max_memory_allocated),
        }  # fmt: skip
        families = {
            key: GaugeMetricFamily(name, doc, labels=["device"]) for key, (name, doc, _) in names.items()
        }
        total = GaugeMetricFamily(
            "semworld_gpu_memory_total_bytes", "GPU memory of the device", labels=["device"]
        )
        for index in range(torch.cuda.device_count()):
            label = [f"cuda:{index}"]
            for key, (_, _, read) in names.items():
                families[key].add_metric(label, float(read(index)))
            total.add_metric(label, float(torch.cuda.get_device_properties(index).total_memory))
        yield from families.values()
        yield total


class _CallbackGauge(Collector):
    def __init__(self, name: str, doc: str, value: Callable[[], float]) -> None:
        self._name, self._doc, self._value = name, doc, value

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self._name, self._doc, value=self._value())


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

        self.deadline_overrun = Histogram(
            "semworld_deadline_overrun_seconds",
            "Seconds the model stayed busy past a synchronous request's deadline (0 when in time)",
            buckets=OVERRUN_BUCKETS,
            registry=self.registry,
        )
        self.max_overrun_s = 0.0
        self.max_overrun_units = 0.0
        self.registry.register(_CallbackGauge(
            "semworld_deadline_overrun_max_seconds",
            "Longest a synchronous request kept the model busy past its deadline",
            lambda: self.max_overrun_s,
        ))  # fmt: skip
        self.registry.register(_CallbackGauge(
            "semworld_deadline_overrun_max_steps",
            "Most a synchronous request kept the model busy past its deadline, in units of the denoising step "
            "(or batch) that was running then: at most 1 plus the time to unwind",
            lambda: self.max_overrun_units,
        ))  # fmt: skip
        self.registry.register(_GpuMemoryCollector())

    def observe_overrun(self, seconds: float, unit_s: float | None = None) -> None:
        """A run that held the model ended `seconds` past its deadline; `unit_s`: its last unit of work."""
        self.deadline_overrun.observe(seconds)
        self.max_overrun_s = max(self.max_overrun_s, seconds)
        if unit_s:
            self.max_overrun_units = max(self.max_overrun_units, seconds / unit_s)

    def watch_jobs(self, counts: Callable[[], Mapping[str, int]], disk_bytes: Callable[[], float]) -> None:
        """`counts()`: jobs by state, read at scrape time; `disk_bytes()`: bytes of job files (inputs and
        results), as last measured by the retention sweep."""
        self.registry.register(_JobsCollector(counts))
        self.registry.register(_CallbackGauge(
            "semworld_job_disk_bytes", "Bytes of job inputs and results on disk", disk_bytes
        ))  # fmt: skip

    def observe_timings(self, timings: Mapping[str, float]) -> None:
        for stage, seconds in timings.items():
            self.stage_seconds.labels(stage).observe(seconds)


class _Merged(Collector):
    """Metric families parsed from several expositions, each sample labelled with the source it came from."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def merge_expositions(texts: Mapping[str, str], label: str = "replica") -> bytes:
    """One Prometheus text exposition from several (`{source: text}`), every sample labelled `label=source`, so
    one scrape of a service with several replicas sees all of them (sum or max over `label` in queries)."""
    merged: dict[str, Metric] = {}
    for source, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            into = merged.setdefault(
                family.name, Metric(family.name, family.documentation, family.type, family.unit)
            )
            into.samples += [s._replace(labels={**s.labels, label: source}) for s in family.samples]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged(list(merged.values())))
    return generate_latest(registry)
