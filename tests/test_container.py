"""The container and the install, for a real GPU box: the torch build is a choice, the pins are a file, and the
service never listens beyond the machine without a key unless the operator says so."""

import subprocess
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.cli.predict import check_bind, is_loopback
from pipeline.utils import UserError

pytestmark = pytest.mark.integration  # shipped weights, subprocesses or servers

REPO = Path(__file__).resolve().parents[1]


def test_a_public_bind_without_a_key_is_refused_unless_allowed_explicitly():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("my-host")
    check_bind("127.0.0.1", has_key=False, without_key=False)
    check_bind("0.0.0.0", has_key=True, without_key=False)
    check_bind("0.0.0.0", has_key=False, without_key=True)
    with pytest.raises(UserError, match="refusing to serve on a non-loopback address without an API key"):
        check_bind("0.0.0.0", has_key=False, without_key=False)


def test_semworld_serve_refuses_before_it_starts(monkeypatch, capsys):
    monkeypatch.delenv("SEMWORLD_API_KEY", raising=False)
    monkeypatch.delenv("SEMWORLD_DEBUG", raising=False)
    monkeypatch.setenv("SEMWORLD_API_KEY", "")
    assert cli.main(["serve", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "SEMWORLD_SERVE_WITHOUT_KEY=1" in err and err.count("\n") == 1


def test_the_image_pins_its_dependencies_and_takes_the_cuda_flavour_as_an_argument():
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert "ARG TORCH_FLAVOUR=cu130" in dockerfile and "--constraint constraints.txt" in dockerfile
    pins = [line for line in (REPO / "docker" / "constraints.txt").read_text().splitlines() if "==" in line]
    names = {line.split("==")[0].lower() for line in pins}
    assert {"diffusers", "transformers", "accelerate", "fastapi"} <= names and "torch" not in names
    compose = (REPO / "docker-compose.yml").read_text()
    assert "TORCH_FLAVOUR" in compose and "cu126" not in compose.split("TORCH_FLAVOUR:")[1].splitlines()[0]


def test_the_makefile_says_where_torch_comes_from():
    dry = subprocess.run(["make", "-n", "-B", "install", "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in dry
    plain = subprocess.run(["make", "-n", "-B", "install"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout  # fmt: skip
    assert "--index-url" not in plain  # empty: pip's own configuration decides
