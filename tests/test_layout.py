"""The import direction of the tree, read from the source (an AST walk, no imports run):

    api -> pipeline (inference) -> models
    pipeline.cli -> pipeline.training -> pipeline.evaluation -> pipeline (inference) -> models
    pipeline.cli -> pipeline.batch -> pipeline (inference)
    pipeline.cli -> api (`semworld serve`; api never imports the CLI)

Inference modules (the files at the top of pipeline/) never import training, evaluation, the CLI, FastAPI or api,
nor any domain (world, pipeline.domains): they get one from the registry in pipeline/domain.py. Models never
import pipeline or api; world is a leaf that imports none of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def imported_modules(path: Path, source: str | None = None) -> set[str]:
    """Every module `path` imports (absolute names; relative imports resolved against its package)."""
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def layer_of(path: Path) -> str:
    parts = path.relative_to(REPO).parts
    if parts[0] == "pipeline" and len(parts) > 2:
        return f"pipeline.{parts[1]}"  # cli, training, evaluation
    return "pipeline" if parts[0] == "pipeline" else parts[0]


# What each layer may not import (a prefix match on the dotted module name).
FORBIDDEN = {
    "models": ("pipeline", "api", "fastapi", "world"),
    "world": ("pipeline", "api", "models", "fastapi"),
    # Inference modules receive a domain from the registry (pipeline.domain); they never import one by name.
    "pipeline": (
        "pipeline.training",
        "pipeline.evaluation",
        "pipeline.cli",
        "pipeline.domains",
        "api",
        "fastapi",
        "uvicorn",
        "world",
    ),
    "pipeline.domains": (
        "pipeline.training",
        "pipeline.evaluation",
        "pipeline.cli",
        "pipeline.batch",
        "api",
        "fastapi",
        "world",
    ),
    "pipeline.evaluation": ("pipeline.training", "pipeline.cli", "api", "fastapi"),
    "pipeline.training": ("pipeline.cli", "api", "fastapi"),
    "pipeline.batch": ("pipeline.training", "pipeline.evaluation", "pipeline.cli", "api", "fastapi"),
    "pipeline.cli": ("fastapi",),  # the outermost layer: `semworld serve` starts the api
    "api": ("pipeline.training", "pipeline.evaluation", "pipeline.cli"),
}

SOURCES = sorted(p for top in ("models", "world", "pipeline", "api") for p in (REPO / top).rglob("*.py"))


def _forbidden(path: Path, source: str | None = None) -> list[str]:
    banned = FORBIDDEN[layer_of(path)]
    imported = imported_modules(path, source)
    return sorted(m for m in imported if any(m == b or m.startswith(b + ".") for b in banned))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_imports_run_one_way(path):
    assert _forbidden(path) == [], f"{path.relative_to(REPO)} imports across the layering"


def test_the_check_sees_a_violation():
    """The rule is not vacuous: an inference module that imports training, or models importing pipeline, is caught."""
    probe = REPO / "pipeline" / "_layout_probe.py"
    assert _forbidden(probe, "from pipeline.training.args import TrainArgs\n") == [
        "pipeline.training.args",
        "pipeline.training.args.TrainArgs",
    ]
    assert _forbidden(REPO / "models" / "_probe.py", "import pipeline.utils\n") == ["pipeline.utils"]
    # an inference module that imports a domain by name, the built-in world's or a shipped one, is caught
    assert _forbidden(probe, "from world.grammar import parse_state\n") == [
        "world.grammar",
        "world.grammar.parse_state",
    ]
    assert _forbidden(probe, "import pipeline.domains.text\n") == ["pipeline.domains.text"]
    assert _forbidden(probe, "from pipeline.domain import get_domain\n") == []  # the registry is how
    assert _forbidden(REPO / "pipeline" / "evaluation" / "_probe.py", "from ..training import args\n") == [
        "pipeline.training",
        "pipeline.training.args",
    ]
    assert layer_of(REPO / "pipeline" / "training" / "all.py") == "pipeline.training"
    assert imported_modules(REPO / "pipeline" / "cli" / "train.py") >= {"pipeline.training.args"}
