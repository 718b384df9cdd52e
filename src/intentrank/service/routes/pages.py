"""The web page (static files, no key: it asks for one and sends it with each API call, so
it shows only what that key may see) and the reports page."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response

STATIC = Path(__file__).resolve().parents[1] / "static"
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                "frame-src blob:; style-src 'self' 'unsafe-inline'"}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def page() -> Response:
    return FileResponse(STATIC / "index.html", headers=PAGE_HEADERS)


@router.get("/ui/reports")
async def reports_page() -> Response:
    return FileResponse(STATIC / "reports.html", headers=PAGE_HEADERS)
