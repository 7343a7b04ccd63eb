"""/docs works without the internet: every script, style and icon it loads is served by the app itself (a CDN
is unreachable offline and in the container, which left the page blank)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from api.main import create_app
from api.settings import Settings
from tests.api.conftest import ASSETS
from tests.fakes import make_pipeline

# src="...", href="..." and Swagger UI's `url: '...'` (the schema it loads).
LINK = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|\burl:\s*["']([^"']+)["']""")
KINDS = {".js": "text/javascript", ".css": "text/css", ".ico": "image/svg+xml", ".json": "application/json"}


def links(html: str) -> list[str]:
    return [a or b for a, b in LINK.findall(html)]


def test_the_api_reference_loads_only_from_the_server(make_client):
    client = make_client(api_key="secret")  # the reference page and its files are public, like / and /static
    r = client.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    expected = {
        "/docs/assets/swagger-ui-bundle.js",
        "/docs/assets/swagger-ui.css",
        "/favicon.ico",
        "/openapi.json",
    }
    assert set(links(r.text)) == expected
    assert "http" not in r.text and "//" not in "".join(links(r.text))  # no CDN
    for url in expected:
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert asset.headers["content-type"].startswith(KINDS[url[url.rindex(".") :]]), url
        assert len(asset.content) > 100, url
    assert "SwaggerUIBundle" in client.get("/docs/assets/swagger-ui-bundle.js").text
    assert ".swagger-ui" in client.get("/docs/assets/swagger-ui.css").text


def test_there_is_no_redoc_page(make_client):
    assert make_client().get("/redoc").status_code == 404  # it would fetch its logo from a CDN


def test_the_api_reference_links_work_under_a_proxy_prefix(tmp_path):
    app = create_app(Settings(data_dir=tmp_path, samples_dir=ASSETS), stages=make_pipeline(0.0))
    with TestClient(app, root_path="/semworld") as client:
        html = client.get("/docs").text
        assert set(links(html)) == {"/semworld/docs/assets/swagger-ui-bundle.js", "/semworld/docs/assets/swagger-ui.css",
                                    "/semworld/favicon.ico", "/semworld/openapi.json"}  # fmt: skip
        assert client.get("/semworld/docs/assets/swagger-ui.css").status_code == 200


def test_the_reference_pages_stay_out_of_the_schema(make_client):
    paths = make_client().get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith(("/docs", "/redoc"))]
