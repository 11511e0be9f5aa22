"""/docs works offline: Swagger UI (5.x, which renders OpenAPI 3.1) is served by the
application from its vendored copy, behind the application's root_path, and the page
names no other host; /redoc is off. The console's configuration and summary routes
answer as the API key says."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

from service.console import SWAGGER_UI, SWAGGER_UI_PATH, VENDOR
from service.main import create_app
from tests.service.conftest import app_settings

ASSET_ATTR = re.compile(r"""(?:src|href)=["']([^"']+)["']""")


def _assets(html: str) -> list[str]:
    return ASSET_ATTR.findall(html)


def test_docs_served_from_the_application(client: TestClient) -> None:
    r = client.get("/docs")
    assert r.status_code == 200
    html = r.text
    assert "://" not in html.replace("http-equiv", ""), "the page names another host"
    assets = _assets(html)
    assert sorted(assets) == sorted(
        f"{SWAGGER_UI_PATH}/{f}"
        for f in ("swagger-ui.css", "favicon-32x32.png", "swagger-ui-bundle.js")
    )
    for url in assets:
        got = client.get(url)
        assert got.status_code == 200, url
        assert got.content == (SWAGGER_UI / Path(url).name).read_bytes()
    assert "url: '/openapi.json'" in html
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
    assert client.get("/redoc").status_code == 404


def test_bundled_swagger_ui_is_version_5(client: TestClient) -> None:
    bundle = client.get(f"{SWAGGER_UI_PATH}/swagger-ui-bundle.js").text
    versions = set(re.findall(r'PACKAGE_VERSION:"(\d+)\.(\d+)\.(\d+)"', bundle))
    assert len(versions) == 1, versions
    ((major, minor, patch),) = versions
    assert int(major) >= 5
    # the version scripts/vendor_assets.sh pinned, as it recorded it
    recorded = (VENDOR / "VERSIONS").read_text()
    assert f"swagger-ui-dist {major}.{minor}.{patch} sha512-" in recorded


def test_docs_behind_a_root_path(tmp_path: Path) -> None:
    app = create_app(app_settings(tmp_path))
    c = TestClient(app, root_path="/pdwatt")  # a proxy serving the application under /pdwatt
    html = c.get("/docs").text
    assert all(a.startswith(f"/pdwatt{SWAGGER_UI_PATH}/") for a in _assets(html)), html
    assert "url: '/pdwatt/openapi.json'" in html


def test_console_config_and_key(make_client: Callable[..., TestClient]) -> None:
    open_ = make_client()
    assert open_.get("/ui/api/config").json() == {"api_key_required": False}
    assert open_.get("/ui/api/sites").json() == {"sites": []}
    page = open_.get("/ui/")
    assert page.status_code == 200 and "app.js" in page.text
    assert "://" not in page.text, "the console page names another host"

    keyed = make_client(api_key="s3cret-key")
    assert keyed.get("/ui/api/config").json() == {"api_key_required": True}
    for route in ("/ui/api/sites", "/ui/api/sites/x", "/ui/api/jobs"):
        r = keyed.get(route)
        assert r.status_code == 401, route
        assert r.headers["content-type"].startswith("application/problem+json")
    assert keyed.get("/ui/api/sites", headers={"X-API-Key": "s3cret-key"}).json() == {"sites": []}
    r = keyed.get("/ui/api/sites/nope", headers={"X-API-Key": "s3cret-key"})
    assert r.status_code == 404 and r.json()["detail"] == "no site 'nope'"
