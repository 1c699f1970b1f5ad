"""HTTP transport of the asyncio client: HTTP/1.1 over asyncio streams (TCP, TLS or a unix
socket), standard library only.

Requests are built, and error responses mapped and retried, by the code the synchronous
transport uses (:class:`warden._http.TransportBase`); only the wire I/O differs. Each call
opens its own connection (``Connection: close``): calls never wait on each other, and a
stream holds nothing but its own socket.
"""

from __future__ import annotations

import asyncio
import email.parser
import http.client
from types import EllipsisType
from typing import Any, AsyncIterable, AsyncIterator, Iterable, Mapping

from . import errors
from ._http import CHUNK, MAX_ERROR_BODY, MAX_EVENT, TransportBase, _BodySource, decode_event, decode_json

__all__ = ["AsyncTransport", "AsyncResponse"]

#: Longest response head (status line and headers) accepted.
MAX_HEAD = 64 << 10

_IO_ERRORS = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)


class AsyncResponse:
    """An HTTP response with a status below 400, its body read on demand.

    ``await r.read()``, ``async for chunk in r.iter_bytes()``, ``async for ev in
    r.iter_lines()``; close it with ``await r.aclose()`` or ``async with``.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int,
                 headers: http.client.HTTPMessage, method: str, timeout: float | None) -> None:
        self._reader = reader
        self._writer = writer
        self.status = status
        self.headers = headers
        self._timeout = timeout
        self._closed = False
        self._done = False
        self._chunked = False
        self._left: int | None = None  # bytes of the body (or of the current chunk) left
        te = (headers.get("Transfer-Encoding") or "").lower()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._done = True
        elif "chunked" in te:
            self._chunked = True
            self._left = 0
        elif headers.get("Content-Length") is not None:
            try:
                self._left = int(headers["Content-Length"])
            except ValueError as e:
                raise errors.ConnectionError(f"bad content-length {headers['Content-Length']!r}") from e
            self._done = self._left == 0

    async def _io(self, aw: Any) -> Any:
        if self._timeout is None:
            return await aw
        return await asyncio.wait_for(aw, self._timeout)

    async def _raw(self, n: int) -> bytes:
        """Up to n bytes of the body (at least one unless it has ended)."""
        if self._done or self._closed:
            return b""
        try:
            if self._chunked:
                if self._left == 0:
                    line = await self._io(self._reader.readline())
                    if not line:
                        raise errors.ConnectionError("read response: connection closed mid-body")
                    try:
                        size = int(line.split(b";", 1)[0].strip(), 16)
                    except ValueError as e:
                        raise errors.ConnectionError(f"read response: bad chunk size {line[:32]!r}") from e
                    if size == 0:
                        while (await self._io(self._reader.readline())).strip():
                            pass  # trailers
                        self._done = True
                        return b""
                    self._left = size
                assert self._left is not None
                b = await self._io(self._reader.read(min(n, self._left)))
                if not b:
                    raise errors.ConnectionError("read response: connection closed mid-chunk")
                self._left -= len(b)
                if self._left == 0:
                    await self._io(self._reader.readexactly(2))
                return bytes(b)
            if self._left is not None:
                b = await self._io(self._reader.read(min(n, self._left)))
                if not b:
                    raise errors.ConnectionError("read response: connection closed mid-body")
                self._left -= len(b)
                self._done = self._left == 0
                return bytes(b)
            b = await self._io(self._reader.read(n))
            if not b:
                self._done = True
            return bytes(b)
        except asyncio.TimeoutError as e:
            raise errors.ConnectionError(f"read response: timed out after {self._timeout} s") from e
        except _IO_ERRORS as e:
            raise errors.ConnectionError(f"read response: {e}") from e

    async def read(self, n: int = -1) -> bytes:
        """Reads n bytes (fewer at the end), or with n < 0 the rest of the body."""
        out = bytearray()
        while n < 0 or len(out) < n:
            b = await self._raw(CHUNK if n < 0 else min(CHUNK, n - len(out)))
            if not b:
                break
            out += b
        return bytes(out)

    async def read1(self, n: int = CHUNK) -> bytes:
        """Up to n bytes as soon as any are there; b"" at the end."""
        return await self._raw(n)

    async def iter_bytes(self, chunk: int = CHUNK) -> AsyncIterator[bytes]:
        """Yields the body in pieces of at most chunk bytes, holding one at a time."""
        try:
            while b := await self._raw(chunk):
                yield b
        finally:
            if self._done:
                await self.aclose()

    async def iter_lines(self, max_line: int = MAX_EVENT) -> AsyncIterator[dict[str, Any]]:
        """Yields each NDJSON line as a dict."""
        buf = bytearray()
        while True:
            i = buf.find(b"\n")
            if i >= 0:
                line, buf = bytes(buf[:i + 1]), buf[i + 1:]
                ev = decode_event(line, max_line)
                if ev is not None:
                    yield ev
                continue
            if len(buf) > max_line:
                raise errors.StreamError(f"stream event over {max_line} bytes")
            b = await self._raw(CHUNK)
            if not b:
                ev = decode_event(bytes(buf) + b"\n", max_line) if buf.strip() else None
                if ev is not None:
                    yield ev
                return
            buf += b

    async def json(self) -> Any:
        try:
            raw = await self.read()
        finally:
            await self.aclose()
        return decode_json(raw)

    async def aclose(self) -> None:
        """Closes the connection; a read waiting in another task ends at once."""
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        try:
            await asyncio.wait_for(self._writer.wait_closed(), 5)
        except (OSError, asyncio.TimeoutError):
            pass

    async def __aenter__(self) -> "AsyncResponse":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _aiter_chunks(it: AsyncIterable[bytes] | Iterable[bytes]) -> AsyncIterator[bytes]:
    if hasattr(it, "__aiter__"):
        async for c in it:
            if isinstance(c, str):
                c = c.encode()
            if c:
                yield bytes(c)
        return
    for c in it:
        if isinstance(c, str):
            c = c.encode()
        if c:
            yield bytes(c)


class AsyncTransport(TransportBase):
    """Sends requests to one daemon on the running event loop, retrying idempotent calls on
    429 and 503 like the synchronous transport."""

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        ep = self.endpoint
        if ep.scheme == "unix":
            return await asyncio.open_unix_connection(ep.socket_path, limit=MAX_HEAD)
        port = ep.port or (443 if ep.scheme == "https" else 80)
        if ep.scheme == "https":
            import ssl
            ctx = self.ssl_context or ssl.create_default_context()
            return await asyncio.open_connection(ep.host, port, ssl=ctx, server_hostname=ep.host, limit=MAX_HEAD)
        return await asyncio.open_connection(ep.host, port, limit=MAX_HEAD)

    def _host(self) -> str:
        ep = self.endpoint
        if ep.scheme == "unix":
            return "wardend"
        host = f"[{ep.host}]" if ":" in ep.host else ep.host
        return f"{host}:{ep.port}" if ep.port else host

    async def _send(self, writer: asyncio.StreamWriter, method: str, url: str, h: Mapping[str, str],
                    src: _BodySource, payload: Any) -> None:
        chunked = payload is not None and src.length is None
        head = [f"{method} {url} HTTP/1.1", f"Host: {self._host()}", "Connection: close"]
        head += [f"{k}: {v}" for k, v in h.items()]
        if chunked:
            head.append("Transfer-Encoding: chunked")
        elif payload is None and method in ("POST", "PUT", "PATCH"):
            head.append("Content-Length: 0")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if payload is None:
            await writer.drain()
            return
        if isinstance(payload, (bytes, bytearray, memoryview)):
            writer.write(payload)
            await writer.drain()
            return

        async def pieces() -> AsyncIterator[bytes]:
            if hasattr(payload, "read"):
                while True:
                    b = payload.read(CHUNK)
                    if asyncio.iscoroutine(b):
                        b = await b
                    if not b:
                        return
                    yield b.encode() if isinstance(b, str) else bytes(b)
            else:
                async for c in _aiter_chunks(src.stream):
                    yield c
        async for b in pieces():
            if chunked:
                writer.write(b"%x\r\n" % len(b) + b + b"\r\n")
            else:
                writer.write(b)
            await writer.drain()
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    async def _head(self, reader: asyncio.StreamReader) -> tuple[int, http.client.HTTPMessage]:
        while True:
            raw = await reader.readuntil(b"\r\n\r\n")
            text = raw.decode("iso-8859-1")
            status_line, _, rest = text.partition("\r\n")
            parts = status_line.split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                raise errors.ConnectionError(f"bad status line {status_line[:80]!r}")
            status = int(parts[1])
            if status == 100:
                continue
            msg = email.parser.Parser(_class=http.client.HTTPMessage).parsestr(rest)
            return status, msg  # type: ignore[return-value]

    async def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                      json: Any = None, body: Any = None, content_type: str | None = None,
                      headers: Mapping[str, str] | None = None, idempotent: bool = False,
                      accept: str = "application/json", stream: bool = False,
                      timeout: float | None | EllipsisType = ...) -> AsyncResponse:
        """Performs one call and returns its response (status < 400), or raises.

        ``timeout`` bounds connecting, sending and waiting for the response's headers; body
        reads of a ``stream=True`` response then wait as long as the stream lasts.
        ``body`` may also be an async iterable of bytes.
        """
        t = self.timeout if isinstance(timeout, EllipsisType) else timeout
        url, h, src = self.prepare(path, query=query, json=json, body=body, content_type=content_type,
                                   headers=headers, accept=accept)
        first: errors.APIError | None = None
        attempt = 0
        while True:
            attempt += 1
            if hasattr(src.stream, "__aiter__"):
                if src.used:
                    raise errors.WardenError("request body cannot be replayed")
                src.used = True
                payload: Any = src.stream
            else:
                payload = src.next()
            writer: asyncio.StreamWriter | None = None
            try:
                async def exchange() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int, Any]:
                    nonlocal writer
                    reader, writer = await self._open()
                    await self._send(writer, method, url, h, src, payload)
                    status, hdrs = await self._head(reader)
                    return reader, writer, status, hdrs
                reader, writer, status, hdrs = await (exchange() if t is None else asyncio.wait_for(exchange(), t))
            except (asyncio.TimeoutError, *_IO_ERRORS) as e:
                if writer is not None:
                    writer.close()
                if not isinstance(e, asyncio.TimeoutError) and self.retry_refused(e, attempt, src):
                    await asyncio.sleep(self.retry.backoff(attempt))
                    continue
                if first is not None:
                    raise first from e
                if isinstance(e, asyncio.TimeoutError):
                    raise errors.ConnectionError(f"{method} {path}: timed out after {t} s") from e
                raise errors.ConnectionError(f"{method} {path}: {e}") from e
            except BaseException:
                if writer is not None:
                    writer.close()
                raise
            resp = AsyncResponse(reader, writer, status, hdrs, method, None if stream else t)
            if status < 400:
                return resp
            try:
                raw = await resp.read(MAX_ERROR_BODY)
            except errors.WardenError:
                raw = b""
            finally:
                await resp.aclose()
            err = errors.error_from_response(status, hdrs, raw)
            wait = self.retry_delay(err, attempt, idempotent, src)
            if wait is None:
                if first is not None and err.status not in (429, 503):
                    raise first
                raise err
            if first is None:
                first = err
            await asyncio.sleep(wait)

    async def call(self, method: str, path: str, **kw: Any) -> Any:
        """Performs a call and returns its decoded JSON body (None when empty)."""
        r = await self.request(method, path, **kw)
        return await r.json()
