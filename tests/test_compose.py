"""docker-compose.yml's services: `batch` shares the server's image and GPU reservation, reads the input folder
read-only and writes to a volume; the scale profile runs Ray Serve on PostgreSQL beside the plain stack. (Its
validity against the compose-spec schema is checked with the Dockerfiles, in tests/api/test_deploy.py.)"""

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


def test_scale_profile_runs_ray_serve_on_postgres_beside_the_plain_stack():
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    scale = {name for name, s in services.items() if s.get("profiles") == ["scale"]}
    assert scale == {"postgres", "ray-head", "ray-worker"}  # `docker compose up` alone: proxy + semworld
    head, worker = services["ray-head"], services["ray-worker"]
    assert "semworld serve --ray" in head["command"][-1] and "ray start --head" in head["command"][-1]
    assert worker["command"][:4] == ["ray", "start", "--address", "ray-head:6379"]
    assert head["build"]["args"]["EXTRAS"] == "distributed,postgres" and worker["image"] == head["image"]
    url = head["environment"]["SEMWORLD_DATABASE_URL"]
    assert url.startswith("postgresql+psycopg://") and "@postgres/" in url
    assert worker["environment"] == head["environment"]  # one settings block for the whole cluster
    assert head["depends_on"]["postgres"]["condition"] == "service_healthy"
    for s in (head, worker):  # every replica sees the same job files
        assert "semworld-data:/data" in s["volumes"] and s["deploy"] == services["semworld"]["deploy"]
