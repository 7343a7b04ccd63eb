"""Every bench script imports: a renamed helper in the package must not leave a bench broken until someone runs it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
OPTIONAL = {"ray"}  # extras a bench may need that the test environment need not have


def _bench(name: str):
    """Import bench/<name>.py (top level only: main() runs under __name__ == "__main__")."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_bench_script_imports(script):
    try:
        module = _bench(script[:-3])
    except ModuleNotFoundError as exc:
        if exc.name not in OPTIONAL:
            raise
        pytest.skip(f"{script} needs the optional {exc.name}")
    assert callable(getattr(module, "main", None)), f"{script} has no main()"


@pytest.mark.parametrize("k", [1, 3, 8])
def test_recall_probe_puts_the_key_k_windows_before_the_answer(k):
    import random

    recall = _bench("memory_recall")
    states, answer = recall.probe_clip(k, random.Random(k))
    assert states[answer] == states[0] and states[0] in recall.KEYS
    assert states[answer - 1] == recall.CUE
    window = states[answer - 4 : answer]  # what a T = 4 predictor sees when it predicts the answer
    assert states[0] not in window and answer == k * 4 + 1


def test_recall_probe_k_ranges_parse_and_refuse_k_0():
    import argparse

    recall = _bench("memory_recall")
    assert recall.k_range("3") == range(3, 4) and recall.k_range("1-8") == range(1, 9)
    for bad in ("0", "4-2", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            recall.k_range(bad)


def test_hide_steps_are_told_apart_by_object_count():
    hide = _bench("memory_hide_steps")
    assert hide.step_kind("red box top left , screen .", "red box upper left , blue ball top midleft , screen .") \
        == "appears"
    assert hide.step_kind("red box top left , blue ball top left , screen .", "red box upper left , screen .") \
        == "disappears"
    assert hide.step_kind("screen .", "screen .") == "same count"


def test_recall_linear_probe_reads_a_key_that_is_there_and_not_one_that_is_not():
    import torch

    recall = _bench("memory_recall")
    g = torch.Generator().manual_seed(0)
    y, yt = torch.randint(0, 20, (400,), generator=g), torch.randint(0, 20, (200,), generator=g)
    codes = torch.randn(20, 32, generator=g)

    def features(labels):  # the key's code at a tiny scale on top of a large shared part and noise
        return 5.0 + 1e-3 * codes[labels] + 1e-4 * torch.randn(len(labels), 32, generator=g)

    assert recall.linear_probe((features(y), y), (features(yt), yt)) > 0.95
    noise = torch.randn(400, 32, generator=g), torch.randn(200, 32, generator=g)
    assert recall.linear_probe((noise[0], y), (noise[1], yt)) < 0.2
