"""GET /docs: the interactive API reference (Swagger UI), with its script and style served from the installed
fastapi-offline package under /docs/assets, never from a CDN, so the page works offline and in the container.
There is no /redoc: ReDoc fetches its logo from its CDN whatever it is given, and one reference is enough."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

# Swagger UI 5 (swagger-ui-bundle.js, swagger-ui.css), as the package ships it.
ASSETS_DIR = Path(str(files("fastapi_offline") / "static"))
ASSETS_URL = "/docs/assets"

router = APIRouter(include_in_schema=False)


def assets() -> StaticFiles:
    """The files to mount at ASSETS_URL (checked at start-up: a missing package fails there, not in a browser)."""
    return StaticFiles(directory=ASSETS_DIR, check_dir=True)


def _root(request: Request) -> str:
    """The path prefix a proxy serves the app under (`root_path`), so that the pages' links work behind it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    root = _root(request)
    return get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title}: API reference",
        swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url=f"{root}/favicon.ico",
    )
