"""Exceptions raised by the Warden SDK.

Every error the daemon reports becomes a :class:`WardenError`, or the subclass for its
stable error code (``error.code`` in the API's error body)::

    try:
        sb = client.sandboxes.get("sb-missing")
    except warden.NotFoundError as e:
        print(e.code, e.message, e.request_id)
"""

from __future__ import annotations

import email.utils
import json
import time
from email.message import Message
from typing import Any, Mapping

from ._types import ERROR_STATUS

__all__ = [
    "WardenError",
    "APIError",
    "BadRequestError",
    "ValidationError",
    "AuthError",
    "ForbiddenError",
    "PermissionDeniedError",
    "ApprovalRequiredError",
    "NotFoundError",
    "ConflictError",
    "PayloadTooLargeError",
    "RateLimitedError",
    "UnavailableError",
    "InternalError",
    "GatewayTimeoutError",
    "BadGatewayError",
    "StreamError",
    "ConnectionError",
    "error_from_response",
]


class WardenError(Exception):
    """Base class of every exception the SDK raises."""


class ConnectionError(WardenError):  # noqa: A001 - shadows the builtin inside this module only
    """The daemon could not be reached, or the connection broke before a response."""


class StreamError(WardenError):
    """A stream ended without its final event, or carried a malformed line."""


class APIError(WardenError):
    """An error response of the Warden API, or an ``error`` event inside a stream.

    ``status`` is the HTTP status (0 for an error event inside a stream), ``code`` the stable
    error code (empty when the response had no Warden error body, for example from a proxy),
    ``message`` the explanation and ``request_id`` the ID of the daemon's log lines.
    """

    def __init__(self, message: str, *, status: int = 0, code: str = "", request_id: str = "",
                 body: Mapping[str, Any] | None = None) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        self.body: Mapping[str, Any] = body or {}
        super().__init__(self._render())

    def _render(self) -> str:
        head = self.code or f"http {self.status}"
        s = f"{head}: {self.message}" if self.message else head
        extra = []
        if self.status:
            extra.append(f"http {self.status}")
        if self.request_id:
            extra.append(f"request {self.request_id}")
        if extra and self.code:
            s += " (" + ", ".join(extra) + ")"
        return s


class BadRequestError(APIError):
    """``bad_request`` or ``invalid_json`` (400): the request is malformed."""


class ValidationError(APIError):
    """``validation_failed`` (422): well formed, but a value is out of range or invalid."""


class AuthError(APIError):
    """``unauthenticated`` (401): no API key, or an unknown, malformed or revoked one."""


class ForbiddenError(APIError):
    """``forbidden`` (403): the key lacks a scope, the object is another principal's, or a
    governance rule denies the action."""


class PermissionDeniedError(APIError):
    """``permission_denied`` (403): inside the sandbox, the file's or program's permissions
    refuse the sandbox user. Not about the API key."""


class ApprovalRequiredError(ForbiddenError):
    """``approval_required`` (403): a governance rule holds the action until it is approved;
    ``approval_id`` names the approval. The identical request passes once after approval."""

    @property
    def approval_id(self) -> str:
        err = self.body.get("error") if isinstance(self.body, Mapping) else None
        return str(err.get("approval_id", "")) if isinstance(err, Mapping) else ""


class NotFoundError(APIError):
    """``not_found`` (404): the sandbox, process, path, principal or key does not exist."""


class ConflictError(APIError):
    """``conflict`` (409): the object is in the wrong state for the call."""


class PayloadTooLargeError(APIError):
    """``payload_too_large`` (413): the request body is over the daemon's limit."""


class RateLimitedError(APIError):
    """``rate_limited`` (429): too many requests. ``retry_after`` is the wait, in seconds,
    the daemon asked for (None when it named none)."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        self.retry_after = retry_after
        super().__init__(message, **kw)


class UnavailableError(APIError):
    """``unavailable`` (503): the daemon or the backend cannot serve the request now."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        self.retry_after = retry_after
        super().__init__(message, **kw)


class InternalError(APIError):
    """``internal`` (500): an unexpected failure in the daemon."""


class GatewayTimeoutError(APIError):
    """``timeout`` (504): the sandbox's agent or backend did not answer in time."""


class BadGatewayError(APIError):
    """``bad_gateway`` (502): nothing answers HTTP on the proxied sandbox port."""


_BY_CODE: dict[str, type[APIError]] = {
    "bad_request": BadRequestError,
    "invalid_json": BadRequestError,
    "validation_failed": ValidationError,
    "unauthenticated": AuthError,
    "forbidden": ForbiddenError,
    "permission_denied": PermissionDeniedError,
    "approval_required": ApprovalRequiredError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "payload_too_large": PayloadTooLargeError,
    "rate_limited": RateLimitedError,
    "unavailable": UnavailableError,
    "internal": InternalError,
    "timeout": GatewayTimeoutError,
    "bad_gateway": BadGatewayError,
}

_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationError,
    429: RateLimitedError,
    500: InternalError,
    502: BadGatewayError,
    503: UnavailableError,
    504: GatewayTimeoutError,
}

# Every stable code of the spec has a class: the generated table and this one must agree.
assert set(ERROR_STATUS) <= set(_BY_CODE), sorted(set(ERROR_STATUS) - set(_BY_CODE))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Reads a Retry-After header: delay-seconds or an HTTP date; None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


def error_from_response(status: int, headers: Mapping[str, str] | Message, body: bytes) -> APIError:
    """Builds the exception for an error response."""
    request_id = headers.get("X-Request-Id", "") or ""
    code, message, parsed = "", "", None
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        parsed = None
    err = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(err, dict) and err.get("code"):
        code = str(err["code"])
        message = str(err.get("message", ""))
        request_id = str(err.get("request_id") or request_id)
    else:
        try:
            text = body.decode("utf-8").strip()
        except UnicodeDecodeError:
            text = ""
        message = text if 0 < len(text) <= 512 else f"http status {status}"
        parsed = None
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or APIError
    kw: dict[str, Any] = {"status": status, "code": code, "request_id": request_id, "body": parsed}
    if cls in (RateLimitedError, UnavailableError):
        kw["retry_after"] = parse_retry_after(headers.get("Retry-After"))
    return cls(message, **kw)


def error_from_event(event: Mapping[str, Any]) -> APIError:
    """Builds the exception for an ``error`` event inside a stream."""
    code = str(event.get("code", ""))
    cls = _BY_CODE.get(code, APIError)
    kw: dict[str, Any] = {"code": code, "body": {"error": dict(event)}}
    return cls(str(event.get("message", "")), **kw)
