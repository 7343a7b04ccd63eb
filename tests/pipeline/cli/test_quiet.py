"""Quiet, readable logs: a normal run shows only what concerns the user; --quiet shows warnings alone."""

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import cli

pytestmark = pytest.mark.integration  # shipped weights, subprocesses or servers

REPO = Path(__file__).resolve().parents[3]


def _run(*argv: str) -> subprocess.CompletedProcess:
    # A fresh process: the libraries' import-time notes are emitted once per process.
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip


@pytest.mark.timeout(300)
def test_a_run_on_the_shipped_weights_says_only_what_concerns_the_user(tmp_path):
    states = tmp_path / "s.txt"
    states.write_text("red ball top left , lamp on .\n")
    argv = ("predict", "--states", str(states), "-k", "1", "--steps", "1", "--out", str(tmp_path / "o"))
    normal = _run(*argv)
    assert normal.returncode == 0, normal.stderr
    for noise in ("torchvision", "accelerate", "Loading", "\x1b[", "it/s", "RenderSettings(", "```"):
        assert noise not in normal.stderr, f"{noise!r} in {normal.stderr}"
    assert "renderer" in normal.stderr and "loaded" in normal.stderr  # our own INFO lines stay, plainly
    assert " INFO " not in normal.stderr  # no timestamps and logger levels unless -v
    quiet = _run("-q", *argv)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert "predicted 1 states" in quiet.stdout


def test_world_generate_says_its_result_once(tmp_path, capsys):
    assert (
        cli.main(["-q", "world", "generate", "--clips", "1", "--out", str(tmp_path), "--workers", "1"]) == 0
    )
    captured = capsys.readouterr()
    assert captured.out.count("wrote 1 clip ") == 1 and captured.err == ""
    assert cli.build_parser().parse_args(["-q", "presets"]).quiet
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["-q", "-v", "presets"])  # one or the other


def test_other_libraries_speak_from_warning_on_and_semworld_from_info():
    def record(name: str, level: int) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, "m", None, None)

    keep = cli.own_info_or_warning
    assert keep(record("pipeline.training.renderer", logging.INFO))
    assert keep(record("world", logging.DEBUG))  # the logger's level decides for our own
    assert not keep(record("matplotlib.font_manager", logging.INFO))  # "generated new fontManager"
    assert not keep(record("pipelines_of_another_library", logging.INFO))
    assert keep(record("ray.data", logging.WARNING)) and keep(record("root", logging.ERROR))


@pytest.mark.timeout(300)
def test_building_a_renderer_to_train_notes_no_missing_torchvision():
    code = (
        "from pipeline.training.image_args import TrainRendererArgs\n"
        "from pipeline.training.renderer_parts import fresh_pipeline\n"
        "pipe = fresh_pipeline(TrainRendererArgs(out='unused'))\n"
        "print(type(pipe).__name__)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "StableDiffusionPipeline"
    assert "torchvision" not in run.stderr, run.stderr
