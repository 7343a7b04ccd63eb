"""docker-compose.yml: valid against the compose-spec schema, and its `batch` service shares the server's image
and GPU reservation, reads the input folder read-only and writes to a volume."""

from __future__ import annotations

from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[1] / "docker-compose.yml"


def test_batch_service_runs_semworld_batch_beside_the_server():
    doc = yaml.safe_load(COMPOSE.read_text())
    server, batch = doc["services"]["semworld"], doc["services"]["batch"]
    assert batch["image"] == server["image"] and batch["deploy"] == server["deploy"]
    assert batch["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert batch["profiles"] == ["batch"]  # `docker compose up` starts the server only
    assert batch["command"][:5] == ["semworld", "batch", "/in", "--out", "/out"]
    assert batch["volumes"][0].endswith(":/in:ro") and batch["volumes"][1] == "semworld-batch:/out"
    assert "semworld-batch" in doc["volumes"] and batch["healthcheck"] == {"disable": True}
