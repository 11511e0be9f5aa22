"""The operator console at ``/ui/`` and the API documentation at ``/docs``, both served
by the application itself (no CDN): see docs/console.md.

:func:`install` adds to an application

* ``/docs``: Swagger UI from the vendored ``swagger-ui-dist`` (``/static/swagger-ui/``),
  over this application's OpenAPI document, behind its ``root_path``;
* ``/ui/``: the console's static front end (HTML, plain JavaScript modules, the vendored
  Vega-Lite), and the few read-only JSON routes of :mod:`service.console.routes` under
  ``/ui/api/``, which summarise for a page what would otherwise take many requests.

Every static file is answered with its (weak) ``ETag`` and ``Last-Modified`` (a request
with ``If-None-Match`` or ``If-Modified-Since`` gets 304) and a ``Cache-Control``:
the vendored libraries (``vendor/``, Swagger UI), which change only with their pinned
versions, are cached for a day (:data:`VENDOR_CACHE`); the console's own files are
revalidated on every use (:data:`OWN_CACHE`), so that a new release is seen at once.
Compression is the application's (``GZipMiddleware``, :mod:`service.main`).
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

from service.console.routes import router

STATIC = Path(__file__).resolve().parent / "static"
VENDOR = STATIC / "vendor"
SWAGGER_UI = VENDOR / "swagger-ui-dist"
#: where Swagger UI's files are served
SWAGGER_UI_PATH = "/static/swagger-ui"
#: the API documentation and the console (``pdwatt serve`` names both when it starts)
DOCS_PATH = "/docs"
CONSOLE_PATH = "/ui"
#: ``Cache-Control`` of the vendored libraries: a day, then revalidated (ETag)
VENDOR_CACHE = "public, max-age=86400"
#: ``Cache-Control`` of the console's own files: revalidated on every use (ETag)
OWN_CACHE = "no-cache"


class CachedFiles(StaticFiles):
    """Static files with a ``Cache-Control``: ``vendor`` for files under
    ``vendor_dir`` (relative to the directory served; every file when None),
    ``own`` for the others."""

    def __init__(
        self,
        *,
        directory: Path,
        html: bool = False,
        vendor_dir: str | None = None,
        vendor: str = VENDOR_CACHE,
        own: str = OWN_CACHE,
    ) -> None:
        super().__init__(directory=directory, html=html)
        self.vendor_root = os.path.realpath(directory / vendor_dir if vendor_dir else directory)
        self.vendor = vendor
        self.own = own

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        path = os.path.realpath(full_path)
        vendored = os.path.commonpath([path, self.vendor_root]) == self.vendor_root
        response.headers["Cache-Control"] = self.vendor if vendored else self.own
        # weak: the same tag names the file whether it is sent gzipped or not
        etag = response.headers.get("etag")
        if etag is not None and not etag.startswith("W/"):
            response.headers["etag"] = f"W/{etag}"
        return response


def install(app: FastAPI) -> None:
    """Serve ``/docs``, ``/static/swagger-ui/`` and the console on ``app``; the
    application must be created with ``docs_url=None`` and ``redoc_url=None``."""

    @app.get(DOCS_PATH, include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - API",
            swagger_js_url=f"{root}{SWAGGER_UI_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{SWAGGER_UI_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{SWAGGER_UI_PATH}/favicon-32x32.png",
        )

    app.include_router(router)  # before the mount below, which would take /ui/api/...
    app.mount(SWAGGER_UI_PATH, CachedFiles(directory=SWAGGER_UI), name="swagger-ui")
    app.mount(
        CONSOLE_PATH,
        CachedFiles(directory=STATIC, html=True, vendor_dir=VENDOR.name),
        name="console",
    )
