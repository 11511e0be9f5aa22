"""The console's static files and the API's JSON, compressed and cached, against a real
``pdwatt serve``: a client that accepts gzip gets the scripts gzipped, and the scripts
a site's page loads (the page's modules and the charts' Vega scripts) come to at most
350 kB over the wire; every static file has a ``Cache-Control`` and an ``ETag`` that a
revalidation answers with 304; a small answer is sent as it is."""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from service.console import OWN_CACHE, STATIC, VENDOR_CACHE

pytestmark = pytest.mark.servers

#: the transferred script weight of a site's page (issue 41's target)
SCRIPT_BUDGET_BYTES = 350_000
GZIP = {"Accept-Encoding": "gzip"}


def page_scripts() -> list[str]:
    """The scripts a site's page loads, under /ui/: the modules index.html names and
    the chart libraries charts.js loads (as its VEGA list names them)."""
    html = (STATIC / "index.html").read_text()
    own = re.findall(r'<(?:script|link)[^>]*(?:src|href)="([^"]+\.js)"', html)
    charts = (STATIC / "charts.js").read_text()
    vega = re.search(r"const VEGA = \[([^\]]*)\]", charts)
    assert vega is not None, "charts.js lists its Vega scripts in VEGA"
    return sorted(set(own)) + re.findall(r'"([^"]+\.js)"', vega.group(1))


def wire(base: str, path: str, headers: dict[str, str]) -> tuple[httpx.Headers, int, bytes]:
    """The answer's headers, its bytes as sent (before decoding) and its body decoded."""
    with httpx.Client(base_url=base, timeout=30) as c, c.stream("GET", path, headers=headers) as r:
        assert r.status_code == 200, (path, r.status_code)
        raw = b"".join(r.iter_raw())
        return r.headers, len(raw), raw


@pytest.fixture(scope="module")
def base(module_live_server: Callable[..., str]) -> str:
    return module_live_server(workers=1)


def test_the_site_pages_scripts_are_gzipped_within_the_budget(base: str) -> None:
    scripts = page_scripts()
    assert {"app.js", "api.js", "charts.js", "vendor/vega/vega.min.js"} <= set(scripts)
    sent = {}
    for path in scripts:
        headers, n, raw = wire(base, f"/ui/{path}", GZIP)
        plain = (STATIC / path).read_bytes()
        assert headers.get("content-encoding") == "gzip", path
        assert gzip.decompress(raw) == plain, path
        assert "Accept-Encoding" in headers.get("vary", ""), path
        sent[path] = (n, len(plain))
    total = sum(n for n, _ in sent.values())
    print(
        f"site page scripts: {total / 1000:.0f} kB sent gzipped, "
        f"{sum(p for _, p in sent.values()) / 1000:.0f} kB as files ("
        + ", ".join(f"{k} {n / 1000:.1f}/{p / 1000:.1f} kB" for k, (n, p) in sent.items())
        + ")"
    )
    assert total <= SCRIPT_BUDGET_BYTES, sent
    # the largest, Vega, on its own: about a third of its size
    n, plain = sent["vendor/vega/vega.min.js"]
    assert n < 0.4 * plain
    # a client that does not ask for gzip gets the file as it is
    headers, n, _ = wire(base, "/ui/vendor/vega/vega.min.js", {"Accept-Encoding": "identity"})
    assert "content-encoding" not in headers and n == plain


def test_static_files_carry_cache_headers_and_revalidate(base: str) -> None:
    cases: list[tuple[str, str]] = [
        ("/ui/vendor/vega/vega.min.js", VENDOR_CACHE),
        ("/ui/vendor/vega-lite/vega-lite.min.js", VENDOR_CACHE),
        ("/static/swagger-ui/swagger-ui-bundle.js", VENDOR_CACHE),
        ("/ui/app.js", OWN_CACHE),
        ("/ui/", OWN_CACHE),
    ]
    assert "max-age=" in VENDOR_CACHE
    for path, cache in cases:
        headers, _, _ = wire(base, path, GZIP)
        assert headers.get("cache-control") == cache, path
        etag = headers.get("etag")
        assert etag and etag.startswith('W/"'), (path, etag)
        assert headers.get("last-modified"), path
        again = httpx.get(f"{base}{path}", headers={**GZIP, "If-None-Match": etag}, timeout=30)
        assert again.status_code == 304 and again.content == b"", path
        assert again.headers.get("cache-control") == cache, path


def test_api_json_is_gzipped_above_the_threshold_only(base: str) -> None:
    headers, n, raw = wire(base, "/openapi.json", GZIP)
    assert headers.get("content-encoding") == "gzip"
    doc: Any = httpx.Response(200, content=gzip.decompress(raw)).json()
    assert doc["openapi"].startswith("3.1") and n < len(gzip.decompress(raw)) / 3
    headers, _, raw = wire(base, "/healthz", GZIP)  # a few bytes: sent as they are
    assert "content-encoding" not in headers and raw.startswith(b"{")
