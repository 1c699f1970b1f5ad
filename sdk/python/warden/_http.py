"""HTTP transport of the synchronous client: http.client over TCP, TLS or a unix socket."""

from __future__ import annotations

import http.client
import io
import json as _json
import os
import random
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from types import EllipsisType
from typing import Any, BinaryIO, Iterable, Iterator, Mapping

from . import errors

DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_SOCKET = "/run/warden/wardend.sock"
DEFAULT_ADMIN_KEY = "/var/lib/warden/admin.key"
ENV_URL = "WARDEN_URL"
ENV_API_KEY = "WARDEN_API_KEY"
USER_AGENT = "warden-python/0.1.0"

#: Bytes read or written per step of a streamed transfer.
CHUNK = 256 << 10
#: Longest NDJSON line a stream may carry.
MAX_EVENT = 4 << 20
#: Most of an error body that is read.
MAX_ERROR_BODY = 64 << 10


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds the retries of one idempotent call on 429 and 503 (and refused connections).

    ``max_attempts`` counts the first try; 1 disables retries. The backoff starts at
    ``min_delay`` seconds and doubles up to ``max_delay``, with jitter; a ``Retry-After``
    from the daemon is honoured up to ``max_retry_after`` seconds (a longer one raises).
    """

    max_attempts: int = 4
    min_delay: float = 0.25
    max_delay: float = 5.0
    max_retry_after: float = 30.0

    def backoff(self, attempt: int) -> float:
        d = min(self.min_delay * (2 ** (attempt - 1)), self.max_delay)
        return d / 2 + random.uniform(0, d / 2)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None, blocksize: int) -> None:
        super().__init__("wardend", timeout=timeout, blocksize=blocksize)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


@dataclass
class Endpoint:
    """Where the daemon is: scheme (http, https, unix), host, port, path prefix, socket."""

    scheme: str
    host: str
    port: int | None
    prefix: str
    socket_path: str

    @classmethod
    def parse(cls, raw: str) -> "Endpoint":
        u = urllib.parse.urlsplit(raw)
        if u.scheme in ("http", "https"):
            if not u.hostname:
                raise ValueError(f"base url {raw!r}: no host")
            return cls(u.scheme, u.hostname, u.port, u.path.rstrip("/"), "")
        if u.scheme == "unix":
            path = u.path or u.netloc
            if not path:
                raise ValueError(f"base url {raw!r}: no socket path")
            return cls("unix", "wardend", None, "", path)
        raise ValueError(f"base url {raw!r}: scheme must be http, https or unix")

    @property
    def base_url(self) -> str:
        if self.scheme == "unix":
            return "http://wardend"
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.port}" if self.port else ""
        return f"{self.scheme}://{host}{port}{self.prefix}"

    def connect(self, timeout: float | None, ssl_context: ssl.SSLContext | None = None) -> http.client.HTTPConnection:
        if self.scheme == "unix":
            return _UnixConnection(self.socket_path, timeout, CHUNK)
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=ssl_context, blocksize=CHUNK)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout, blocksize=CHUNK)


def default_base_url() -> str:
    """$WARDEN_URL, else the default unix socket when it exists, else the TCP default."""
    env = os.environ.get(ENV_URL)
    if env:
        return env
    if os.path.exists(DEFAULT_SOCKET) and os.access(DEFAULT_SOCKET, os.W_OK):
        return "unix://" + DEFAULT_SOCKET
    return DEFAULT_URL


def default_api_key() -> str:
    """$WARDEN_API_KEY, else the first admin key when this user can read it (as the CLI)."""
    env = os.environ.get(ENV_API_KEY)
    if env:
        return env
    try:
        with open(DEFAULT_ADMIN_KEY, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def decode_event(line: bytes, max_line: int = MAX_EVENT) -> dict[str, Any] | None:
    """Decodes one NDJSON line of a stream (None for a blank line); shared by both clients."""
    if len(line) > max_line and not line.endswith(b"\n"):
        raise errors.StreamError(f"stream event over {max_line} bytes")
    line = line.strip()
    if not line:
        return None
    try:
        ev = _json.loads(line)
    except ValueError as e:
        raise errors.StreamError(f"decode stream event: {e}") from e
    if not isinstance(ev, dict):
        raise errors.StreamError("stream event is not an object")
    return ev


def decode_json(raw: bytes) -> Any:
    """Decodes a whole JSON response body (None when empty)."""
    if not raw:
        return None
    try:
        return _json.loads(raw)
    except ValueError as e:
        raise errors.StreamError(f"decode response: {e}") from e


class Response:
    """An HTTP response with a status below 400. Close it (or use ``with``) when done."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._resp = resp
        self.status = resp.status
        self.headers = resp.headers

    def read(self, n: int = -1) -> bytes:
        try:
            return self._resp.read(n) if n >= 0 else self._resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise errors.ConnectionError(f"read response: {e}") from e

    def read1(self, n: int = CHUNK) -> bytes:
        try:
            return self._resp.read1(n)
        except (OSError, http.client.HTTPException) as e:
            raise errors.ConnectionError(f"read response: {e}") from e

    def iter_bytes(self, chunk: int = CHUNK) -> Iterator[bytes]:
        while True:
            b = self.read1(chunk)
            if not b:
                return
            yield b

    def iter_lines(self, max_line: int = MAX_EVENT) -> Iterator[dict[str, Any]]:
        """Yields each NDJSON line as a dict."""
        while True:
            try:
                line = self._resp.readline(max_line + 1)
            except (OSError, http.client.HTTPException) as e:
                raise errors.ConnectionError(f"read stream: {e}") from e
            if not line:
                return
            ev = decode_event(line, max_line)
            if ev is not None:
                yield ev

    def json(self) -> Any:
        raw = self.read()
        self.close()
        return decode_json(raw)

    def close(self) -> None:
        """Closes the response; a read blocked in another thread returns at once."""
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in another thread
            except OSError:
                pass
        try:
            self._resp.close()
        finally:
            self._conn.close()

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Body = bytes | str | BinaryIO | Iterable[bytes] | None


class _BodySource:
    """Produces the request body for each attempt; knows whether it can be replayed."""

    def __init__(self, json: Any, body: Body) -> None:
        self.data: bytes | None = None
        self.stream: Any = None
        self.start = 0
        self.length: int | None = None
        self.used = False
        self.seekable = False
        if json is not None:
            self.data = _json.dumps(json, separators=(",", ":")).encode()
        elif isinstance(body, str):
            self.data = body.encode()
        elif isinstance(body, (bytes, bytearray, memoryview)):
            self.data = bytes(body)
        elif body is not None:
            self.stream = body
            b: Any = body
            if hasattr(b, "read"):
                try:
                    self.start = b.tell()
                    self.seekable = b.seekable()
                except (OSError, AttributeError, io.UnsupportedOperation):
                    self.seekable = False
                if self.seekable:
                    try:
                        end = b.seek(0, io.SEEK_END)
                        b.seek(self.start)
                        self.length = max(end - self.start, 0)
                    except (OSError, io.UnsupportedOperation):
                        self.length = None
        if self.data is not None:
            self.length = len(self.data)

    @property
    def replayable(self) -> bool:
        return self.stream is None or self.seekable

    def next(self) -> Any:
        if self.stream is None:
            return self.data
        if self.used:
            if not self.seekable:
                raise errors.WardenError("request body cannot be replayed")
            self.stream.seek(self.start)
        self.used = True
        if hasattr(self.stream, "read"):
            return self.stream
        return _chunks(self.stream)


def _chunks(it: Iterable[bytes]) -> Iterator[bytes]:
    for c in it:
        if isinstance(c, str):
            c = c.encode()
        if c:
            yield bytes(c)


class TransportBase:
    """What the synchronous and the asyncio transports share: where the daemon is, the
    credentials, how a request is built and which failures are retried."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float | None = 60.0, retry: RetryPolicy | None = None,
                 user_agent: str = USER_AGENT, ssl_context: ssl.SSLContext | None = None) -> None:
        self.endpoint = Endpoint.parse(base_url or default_base_url())
        self.api_key = default_api_key() if api_key is None else api_key
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.user_agent = user_agent
        self.ssl_context = ssl_context

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

    def url(self, path: str, query: Mapping[str, Any] | None = None) -> str:
        return self.endpoint.prefix + path + _query(query)

    def headers(self, extra: Mapping[str, str] | None = None, accept: str = "application/json") -> dict[str, str]:
        h = {"User-Agent": self.user_agent, "Accept": accept}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        if extra:
            h.update(extra)
        return h

    def prepare(self, path: str, *, query: Mapping[str, Any] | None, json: Any, body: Any,
                content_type: str | None, headers: Mapping[str, str] | None,
                accept: str) -> tuple[str, dict[str, str], "_BodySource"]:
        """The URL, headers and body source of a call."""
        src = _BodySource(json, body)
        h = self.headers(headers, accept)
        if json is not None:
            h["Content-Type"] = "application/json"
        elif body is not None:
            h["Content-Type"] = content_type or "application/octet-stream"
        if src.length is not None and (body is not None or json is not None):
            h["Content-Length"] = str(src.length)
        return self.url(path, query), h, src

    def retry_refused(self, e: BaseException, attempt: int, src: "_BodySource") -> bool:
        """Whether a failed connection attempt is tried again (refused or no socket yet)."""
        refused = isinstance(e, (ConnectionRefusedError, FileNotFoundError))
        return refused and attempt < self.retry.max_attempts and src.replayable

    def retry_delay(self, err: errors.APIError, attempt: int, idempotent: bool,
                    src: "_BodySource") -> float | None:
        """Seconds to wait before trying an error response's call again; None: raise it."""
        if err.status not in (429, 503) or not idempotent or not src.replayable:
            return None
        if attempt >= self.retry.max_attempts:
            return None
        wait = getattr(err, "retry_after", None)
        if wait is None:
            return self.retry.backoff(attempt)
        if wait > self.retry.max_retry_after:
            return None
        return float(wait)


class Transport(TransportBase):
    """Sends requests to one daemon, retrying idempotent calls on 429 and 503."""

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                json: Any = None, body: Body = None, content_type: str | None = None,
                headers: Mapping[str, str] | None = None, idempotent: bool = False,
                accept: str = "application/json", stream: bool = False,
                timeout: float | None | EllipsisType = ...) -> Response:
        """Performs one call and returns its response (status < 400), or raises.

        ``timeout`` (seconds, default the client's) bounds connecting, sending and waiting for
        the response's headers; for ``stream=True`` reads of the body then wait as long as
        the stream lasts, otherwise each read is bounded too.
        """
        t = self.timeout if isinstance(timeout, EllipsisType) else timeout
        url, h, src = self.prepare(path, query=query, json=json, body=body, content_type=content_type,
                                   headers=headers, accept=accept)
        first: errors.APIError | None = None
        attempt = 0
        while True:
            attempt += 1
            payload = src.next()
            conn = self.endpoint.connect(t, self.ssl_context)
            try:
                conn.request(method, url, body=payload, headers=h,
                             encode_chunked=payload is not None and src.length is None)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                if self.retry_refused(e, attempt, src):
                    time.sleep(self.retry.backoff(attempt))
                    continue
                if first is not None:
                    raise first from e
                if isinstance(e, (socket.timeout, TimeoutError)):
                    raise errors.ConnectionError(f"{method} {path}: timed out after {t} s") from e
                raise errors.ConnectionError(f"{method} {path}: {e}") from e
            if resp.status < 400:
                if stream and conn.sock is not None:
                    conn.sock.settimeout(None)
                return Response(conn, resp)
            try:
                raw = resp.read(MAX_ERROR_BODY)
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                conn.close()
            err = errors.error_from_response(resp.status, resp.headers, raw)
            wait = self.retry_delay(err, attempt, idempotent, src)
            if wait is None:
                if first is not None and err.status not in (429, 503):
                    raise first
                raise err
            if first is None:
                first = err
            time.sleep(wait)

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """Performs a call and returns its decoded JSON body (None when empty)."""
        return self.request(method, path, **kw).json()


def _query(q: Mapping[str, Any] | None) -> str:
    if not q:
        return ""
    pairs: list[tuple[str, str]] = []
    for k, v in q.items():
        if v is None or v is False:
            continue
        if isinstance(v, bool):
            pairs.append((k, "true" if v else "false"))
        elif isinstance(v, (list, tuple)):
            pairs.extend((k, str(x)) for x in v)
        else:
            pairs.append((k, str(v)))
    return "?" + urllib.parse.urlencode(pairs) if pairs else ""


def quote(seg: str | int) -> str:
    """Escapes one path segment."""
    return urllib.parse.quote(str(seg), safe="")
