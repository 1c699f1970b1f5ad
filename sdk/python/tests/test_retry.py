"""Retries on 429/503 for idempotent calls only, Retry-After, and error decoding, against a
local fake server (no daemon needed)."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Iterator

import pytest

import warden


class _Handler(http.server.BaseHTTPRequestHandler):
    script: list[tuple[int, dict[str, str], bytes]] = []
    seen: list[str] = []

    def _serve(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        self.seen.append(f"{self.command} {self.path}")
        status, headers, body = self.script.pop(0) if self.script else (200, {}, b"{}")
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _serve

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture()
def fake() -> Iterator[type[_Handler]]:
    _Handler.script, _Handler.seen = [], []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    th.start()
    _Handler.url = f"http://127.0.0.1:{srv.server_address[1]}"  # type: ignore[attr-defined]
    yield _Handler
    srv.shutdown()


def _err(code: str, status: int, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps({"error": {"code": code, "message": code + " here", "request_id": "req-1"}}).encode()
    return status, {"Content-Type": "application/json", **(headers or {})}, body


def _client(fake: type[_Handler]) -> warden.Warden:
    return warden.Warden(fake.url, "k", retry=warden.RetryPolicy(min_delay=0.01, max_delay=0.02))  # type: ignore[attr-defined]


def test_idempotent_call_retried(fake: type[_Handler]) -> None:
    fake.script = [_err("rate_limited", 429, {"Retry-After": "0"}), _err("unavailable", 503),
                   (200, {}, b'{"status":"ok","version":"x"}')]
    assert _client(fake).health()["status"] == "ok"
    assert fake.seen == ["GET /healthz"] * 3


def test_non_idempotent_call_not_retried(fake: type[_Handler]) -> None:
    fake.script = [_err("rate_limited", 429, {"Retry-After": "1"})]
    with pytest.raises(warden.RateLimitedError) as ei:
        _client(fake).sandboxes.create()
    assert ei.value.retry_after == 1.0 and ei.value.status == 429 and ei.value.request_id == "req-1"
    assert fake.seen == ["POST /v1/sandboxes"]


def test_retries_exhausted(fake: type[_Handler]) -> None:
    fake.script = [_err("unavailable", 503)] * 4
    with pytest.raises(warden.UnavailableError):
        _client(fake).health()
    assert len(fake.seen) == 4


def test_long_retry_after_not_waited(fake: type[_Handler]) -> None:
    fake.script = [_err("rate_limited", 429, {"Retry-After": "3600"})]
    with pytest.raises(warden.RateLimitedError) as ei:
        _client(fake).health()
    assert ei.value.retry_after == 3600
    assert len(fake.seen) == 1


@pytest.mark.parametrize("code,status,cls", [
    ("not_found", 404, warden.NotFoundError), ("conflict", 409, warden.ConflictError),
    ("unauthenticated", 401, warden.AuthError), ("forbidden", 403, warden.ForbiddenError),
    ("permission_denied", 403, warden.PermissionDeniedError), ("validation_failed", 422, warden.ValidationError),
    ("payload_too_large", 413, warden.PayloadTooLargeError), ("internal", 500, warden.InternalError),
    ("timeout", 504, warden.GatewayTimeoutError), ("bad_gateway", 502, warden.BadGatewayError),
    ("approval_required", 403, warden.ApprovalRequiredError), ("invalid_json", 400, warden.BadRequestError),
])
def test_error_classes(fake: type[_Handler], code: str, status: int, cls: type) -> None:
    fake.script = [_err(code, status)]
    with pytest.raises(cls) as ei:
        _client(fake).whoami()
    assert ei.value.code == code and ei.value.status == status


def test_non_warden_error_body(fake: type[_Handler]) -> None:
    fake.script = [(502, {}, b"upstream broke")]
    with pytest.raises(warden.BadGatewayError) as ei:
        _client(fake).whoami()
    assert ei.value.code == "" and ei.value.message == "upstream broke"


def test_connection_refused() -> None:
    c = warden.Warden("http://127.0.0.1:1", "k", retry=warden.RetryPolicy(max_attempts=2, min_delay=0.01))
    with pytest.raises(warden.ConnectionError):
        c.health()


def test_env_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARDEN_URL", "http://example.invalid:9")
    monkeypatch.setenv("WARDEN_API_KEY", "wdn_env")
    c = warden.Warden()
    assert c.base_url == "http://example.invalid:9" and c._tr.api_key == "wdn_env"
    assert warden.Warden("unix:///run/x.sock").base_url == "http://wardend"
    with pytest.raises(ValueError):
        warden.Warden("ftp://x")
