"""The operator console at ``/ui/`` and the API documentation at ``/docs``, both served
by the application itself (no CDN): see docs/console.md.

:func:`install` adds to an application

* ``/docs``: Swagger UI from the vendored ``swagger-ui-dist`` (``/static/swagger-ui/``),
  over this application's OpenAPI document, behind its ``root_path``;
* ``/ui/``: the console's static front end (HTML, plain JavaScript modules, the vendored
  Vega-Lite), and the few read-only JSON routes of :mod:`service.console.routes` under
  ``/ui/api/``, which summarise for a page what would otherwise take many requests.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from service.console.routes import router

STATIC = Path(__file__).resolve().parent / "static"
VENDOR = STATIC / "vendor"
SWAGGER_UI = VENDOR / "swagger-ui-dist"
#: where Swagger UI's files are served
SWAGGER_UI_PATH = "/static/swagger-ui"
#: the API documentation and the console (``pdwatt serve`` names both when it starts)
DOCS_PATH = "/docs"
CONSOLE_PATH = "/ui"


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
    app.mount(SWAGGER_UI_PATH, StaticFiles(directory=SWAGGER_UI), name="swagger-ui")
    app.mount(CONSOLE_PATH, StaticFiles(directory=STATIC, html=True), name="console")
