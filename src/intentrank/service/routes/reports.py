"""GET /reports and /reports/{name}: the experiment reports the server was configured with
(benchmark collections, never served documents), by name only; needs ``evaluate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from intentrank.service.engine import RequestError
from intentrank.service.models import ReportInfo
from intentrank.service.principal import Evaluator
from intentrank.service.routes.common import ERRORS, settings_of

router = APIRouter(tags=["reports"])


def list_reports(dirs: list[Path]) -> dict[str, Path]:
    """File name -> path of every ``*.html`` directly inside ``dirs`` (the first directory
    wins a name twice): the reports served, by name, never by a path from the request."""
    found: dict[str, Path] = {}
    for directory in map(Path, dirs):
        if directory.is_dir():
            for path in sorted(directory.glob("*.html")):
                if path.is_file() and not path.is_symlink():
                    found.setdefault(path.name, path)
    return found


@router.get("/reports", response_model=list[ReportInfo], responses=ERRORS)
async def reports(request: Request, who: Evaluator) -> list[dict[str, Any]]:
    """The experiment reports (self-contained HTML) the server was configured with."""
    return [{"name": n, "bytes": p.stat().st_size}
            for n, p in list_reports(settings_of(request).report_dirs).items()]


@router.get("/reports/{name}", response_class=HTMLResponse, responses=ERRORS)
async def report(name: str, request: Request, who: Evaluator) -> Response:
    """One report, by a name GET /reports lists."""
    path = list_reports(settings_of(request).report_dirs).get(name)
    if path is None:
        raise RequestError(404, f"no report named {name!r}; see GET /reports")
    return HTMLResponse(path.read_text(encoding="utf-8"),
                        headers={"Content-Security-Policy": "sandbox"})
