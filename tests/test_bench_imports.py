"""Every bench script imports: a renamed helper in the package must not leave a bench broken until someone runs it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
OPTIONAL = {"ray"}  # extras a bench may need that the test environment need not have


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_bench_script_imports(script):
    spec = importlib.util.spec_from_file_location(f"bench_{script[:-3]}", BENCH / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)  # top level only: main() runs under __name__ == "__main__"
    except ModuleNotFoundError as exc:
        if exc.name not in OPTIONAL:
            raise
        pytest.skip(f"{script} needs the optional {exc.name}")
    assert callable(getattr(module, "main", None)), f"{script} has no main()"
