"""Webhooks: a job submitted with ``"webhook": {"url": ...}`` is POSTed, once it ends
(succeeded, failed or cancelled), to that URL as the document ``GET /v1/jobs/{id}``
answers, signed with HMAC-SHA256.

Signature (header ``Pdwatt-Signature: t=<unix seconds>,v1=<hex>``): ``hex`` is
``HMAC-SHA256(PDWATT_WEBHOOK_SECRET, "<t>." + body)`` over the exact bytes sent. A
receiver recomputes it with the shared secret, compares in constant time and refuses a
``t`` too far from its clock (replays). Without a secret the server sends nothing
unsigned: a job asking for a webhook is refused (422 naming ``webhook``).

Targets: only ``http`` and ``https`` URLs whose host resolves to public addresses, so
that a request cannot make the server reach its own network (loopback, private,
link-local such as cloud metadata, multicast, reserved) unless
``PDWATT_WEBHOOK_ALLOW_PRIVATE`` is set (an EMS on the site's own network). The check runs
at submission (422) and again before each delivery (the name may resolve elsewhere by
then); redirects are not followed.

Delivery: up to ``ATTEMPTS`` tries, ``TIMEOUT_S`` each, with backoff; a 2xx answer is a
delivery. The outcome is kept on the job (``webhook``: ``url``, ``state`` pending /
delivered / failed, ``attempts``, ``status_code``, ``error``). The first process to
claim a job's delivery sends it (:class:`Notifier`); no job is notified twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from service.runtime.jobstore import JobStore
from service.runtime.settings import Settings

log = logging.getLogger(__name__)

ATTEMPTS = 3
TIMEOUT_S = 5.0
BACKOFF_S = (0.5, 2.0)
SIGNATURE_HEADER = "Pdwatt-Signature"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Pdwatt-Signature`` header's value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(secret: str, header: str, body: bytes, now: float, tolerance_s: float = 300) -> bool:
    """What a receiver checks (the tests use it as a receiver would)."""
    try:
        parts = dict(p.split("=", 1) for p in header.split(","))
        t = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - t) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, t, body), header)


def target_error(url: str, allow_private: bool) -> str | None:
    """Why the server will not POST to ``url`` (None: it will)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "only http and https URLs are notified"
    if not parts.hostname:
        return "the URL names no host"
    if parts.username is not None or parts.password is not None:
        return "credentials in the URL are not accepted"
    if allow_private:
        return None
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return f"host {parts.hostname!r} does not resolve"
    for info in infos:
        addr = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not addr.is_global or addr.is_multicast:
            return (
                f"host {parts.hostname!r} resolves to {addr}, which is not a public address "
                "(set PDWATT_WEBHOOK_ALLOW_PRIVATE for an EMS on the server's own network)"
            )
    return None


def body_of(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


async def deliver(
    url: str,
    document: dict[str, Any],
    secret: str,
    allow_private: bool,
    attempts: int = ATTEMPTS,
) -> dict[str, Any]:
    """POST ``document`` to ``url``, signed; the outcome as kept on the job."""
    outcome: dict[str, Any] = {"url": url, "state": "failed", "attempts": 0}
    body = body_of(document)
    async with httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=False) as client:
        for i in range(attempts):
            why = await asyncio.to_thread(target_error, url, allow_private)
            if why is not None:
                outcome["error"] = why
                return outcome
            outcome["attempts"] = i + 1
            headers = {
                "content-type": "application/json",
                SIGNATURE_HEADER: sign(secret, int(time.time()), body),
                "Pdwatt-Event": "job.ended",
                "Pdwatt-Job": str(document.get("id", "")),
            }
            try:
                r = await client.post(url, content=body, headers=headers)
                outcome["status_code"] = r.status_code
                if 200 <= r.status_code < 300:
                    outcome["state"] = "delivered"
                    outcome.pop("error", None)
                    return outcome
                outcome["error"] = f"the receiver answered {r.status_code}"
            except httpx.HTTPError as exc:
                outcome.pop("status_code", None)
                outcome["error"] = f"{type(exc).__name__}: {exc}"[:300]
            if i + 1 < attempts:
                await asyncio.sleep(BACKOFF_S[min(i, len(BACKOFF_S) - 1)])
    log.warning("webhook of job %s not delivered: %s", document.get("id"), outcome.get("error"))
    return outcome


@dataclass(frozen=True)
class Notifier:
    """Sends ended jobs' webhooks (:func:`deliver`); without a secret it
    sends nothing (jobs asking for one are refused at submission)."""

    secret: str | None
    allow_private: bool = False

    @classmethod
    def of(cls, settings: Settings) -> Notifier:
        return cls(settings.webhook_secret, settings.webhook_allow_private)

    async def job_ended(self, store: JobStore, job_id: str) -> None:
        if self.secret is None or not await asyncio.to_thread(store.claim_webhook, job_id):
            return
        job = await asyncio.to_thread(store.get, job_id)
        document = job.document()
        document.pop("webhook", None)
        outcome = await deliver(job.webhook_url or "", document, self.secret, self.allow_private)
        await asyncio.to_thread(store.record_webhook, job_id, outcome)

    async def pending(self, store: JobStore) -> int:
        """Send the webhooks of ended jobs that no process has claimed; how many."""
        ids = await asyncio.to_thread(store.unnotified)
        for job_id in ids:
            await self.job_ended(store, job_id)
        return len(ids)
