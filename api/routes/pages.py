"""GET /: the web page (static HTML, JS and CSS; no build step)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"

router = APIRouter(include_in_schema=False)


@router.get("/")
def index() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


@router.get("/favicon.ico")
def favicon() -> FileResponse:
    """The page's icon (browsers ask for /favicon.ico whatever the page says)."""
    return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")
