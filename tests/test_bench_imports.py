"""Every bench script imports as a module of the bench package: a renamed helper in the library must not leave a
bench broken until someone runs it, and each runs as `python -m bench.X` from the repository root."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
OPTIONAL = {"ray", "ale_py"}  # extras a bench may need that the test environment need not have
MODULES = sorted(".".join(p.relative_to(REPO).with_suffix("").parts) for p in BENCH.rglob("*.py")
                 if p.name != "__init__.py")  # fmt: skip


def _bench(name: str):
    """Import bench.<name> (top level only: main() runs under __name__ == "__main__")."""
    return importlib.import_module(f"bench.{name}")


@pytest.mark.parametrize("module", MODULES)
def test_bench_script_imports(module):
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name not in OPTIONAL:
            raise
        pytest.skip(f"{module} needs the optional {exc.name}")
    path = Path(mod.__file__)
    if 'if __name__ == "__main__":' in path.read_text():  # a script, not a helper such as attentime.tasks
        assert callable(getattr(mod, "main", None)), f"{module} has no main()"


def test_bench_has_no_sys_path_hacks():
    """The scripts import each other and the library as packages (`python -m bench.X` from the repository root)."""
    hacks = [str(p.relative_to(REPO)) for p in BENCH.rglob("*.py") if "sys.path.insert" in p.read_text()]
    assert hacks == []


def test_a_bench_runs_as_a_module_from_the_repository_root():
    proc = subprocess.run([sys.executable, "-m", "bench.experiments.plot_recall", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "recall probe" in proc.stdout


@pytest.mark.parametrize("k", [1, 3, 8])
def test_recall_probe_puts_the_key_k_windows_before_the_answer(k):
    import random

    recall = _bench("experiments.memory_recall")
    states, answer = recall.probe_clip(k, random.Random(k))
    assert states[answer] == states[0] and states[0] in recall.KEYS
    assert states[answer - 1] == recall.CUE
    window = states[answer - 4 : answer]  # what a T = 4 predictor sees when it predicts the answer
    assert states[0] not in window and answer == k * 4 + 1


def test_recall_probe_k_ranges_parse_and_refuse_k_0():
    import argparse

    recall = _bench("experiments.memory_recall")
    assert recall.k_range("3") == range(3, 4) and recall.k_range("1-8") == range(1, 9)
    for bad in ("0", "4-2", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            recall.k_range(bad)


def test_hide_steps_are_told_apart_by_object_count():
    hide = _bench("experiments.memory_hide_steps")
    assert (
        hide.step_kind("red box top left , screen .", "red box upper left , blue ball top midleft , screen .")
        == "appears"
    )
    assert (
        hide.step_kind("red box top left , blue ball top left , screen .", "red box upper left , screen .")
        == "disappears"
    )
    assert hide.step_kind("screen .", "screen .") == "same count"


def test_recall_linear_probe_reads_a_key_that_is_there_and_not_one_that_is_not():
    import torch

    recall = _bench("experiments.memory_recall")
    g = torch.Generator().manual_seed(0)
    y, yt = torch.randint(0, 20, (400,), generator=g), torch.randint(0, 20, (200,), generator=g)
    codes = torch.randn(20, 32, generator=g)

    def features(labels):  # the key's code at a tiny scale on top of a large shared part and noise
        return 5.0 + 1e-3 * codes[labels] + 1e-4 * torch.randn(len(labels), 32, generator=g)

    assert recall.linear_probe((features(y), y), (features(yt), yt)) > 0.95
    noise = torch.randn(400, 32, generator=g), torch.randn(200, 32, generator=g)
    assert recall.linear_probe((noise[0], y), (noise[1], yt)) < 0.2
