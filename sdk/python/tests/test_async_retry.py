"""The asyncio transport shares the synchronous one's retry rules and error mapping: retries on
429/503 for idempotent calls only, Retry-After, error classes, timeouts; against the local
fake server of test_retry (no daemon needed)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from test_retry import _err, _Handler, fake  # noqa: F401 - the fixture

import warden


def _client(fake: type[_Handler], **kw: Any) -> warden.AsyncWarden:  # noqa: F811
    return warden.AsyncWarden(fake.url, "k", retry=warden.RetryPolicy(min_delay=0.01, max_delay=0.02),  # type: ignore[attr-defined]
                              **kw)


def test_async_idempotent_call_retried(fake: type[_Handler]) -> None:  # noqa: F811
    fake.script = [_err("rate_limited", 429, {"Retry-After": "0"}), _err("unavailable", 503),
                   (200, {}, b'{"status":"ok","version":"x"}')]
    assert asyncio.run(_client(fake).health())["status"] == "ok"
    assert fake.seen == ["GET /healthz"] * 3


def test_async_non_idempotent_call_not_retried(fake: type[_Handler]) -> None:  # noqa: F811
    fake.script = [_err("rate_limited", 429, {"Retry-After": "1"})]
    with pytest.raises(warden.RateLimitedError) as ei:
        asyncio.run(_client(fake).sandboxes.create())
    assert ei.value.retry_after == 1.0 and ei.value.status == 429 and ei.value.request_id == "req-1"
    assert fake.seen == ["POST /v1/sandboxes"]


@pytest.mark.parametrize("code,status,cls", [
    ("not_found", 404, warden.NotFoundError), ("conflict", 409, warden.ConflictError),
    ("unauthenticated", 401, warden.AuthError), ("approval_required", 403, warden.ApprovalRequiredError),
    ("validation_failed", 422, warden.ValidationError), ("bad_gateway", 502, warden.BadGatewayError),
])
def test_async_error_classes(fake: type[_Handler], code: str, status: int, cls: type) -> None:  # noqa: F811
    fake.script = [_err(code, status)]
    with pytest.raises(cls) as ei:
        asyncio.run(_client(fake).whoami())
    assert ei.value.code == code and ei.value.status == status


def test_async_timeout_and_refused() -> None:
    """A daemon that never answers times out as a ConnectionError; a closed port is refused."""
    ln = socket.socket()
    ln.bind(("127.0.0.1", 0))
    ln.listen(1)
    try:
        c = warden.AsyncWarden(f"http://127.0.0.1:{ln.getsockname()[1]}", "k", timeout=0.3)
        with pytest.raises(warden.ConnectionError, match="timed out"):
            asyncio.run(c.health())
    finally:
        ln.close()
    c = warden.AsyncWarden("http://127.0.0.1:1", "k", retry=warden.RetryPolicy(max_attempts=2, min_delay=0.01))
    with pytest.raises(warden.ConnectionError):
        asyncio.run(c.health())
