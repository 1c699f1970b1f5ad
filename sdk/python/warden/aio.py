"""The asyncio client: :class:`AsyncWarden` has the synchronous client's API with every call
awaitable and every stream an async iterator.

It is native asyncio: requests go over asyncio streams (:mod:`warden._aio_http`), no worker
threads, no third-party library. The request of each call is built by the same code as in
:class:`warden.Warden`: the part of this module between the GENERATED markers is copied from
client.py by ``tools/gen_aio.py`` (the suite fails when it is stale); streams, context
managers and the terminal are written here. Cancelling a task that reads a stream closes
the stream (a process keeps running; re-attach with :meth:`AsyncSandbox.attach`).

    async with AsyncWarden() as client:
        async with await client.sandboxes.create() as sb:
            r = await sb.exec("echo hi", on_stdout=print)
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
import json as _json
import os
import ssl
import struct
from typing import IO, Any, AsyncIterator, Awaitable, BinaryIO, Callable, List, Literal, Mapping, Sequence, cast

from . import _types as t
from . import errors
from ._aio_http import AsyncResponse, AsyncTransport
from ._http import CHUNK, Body, RetryPolicy, quote
from ._ws import _GUID, MAX_FRAME, OP_BINARY, OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT, _mask
from .client import (RUN_ENDED, CodeError, CodeResult, CodeRun, ExecResult, Execution, ProcessOutput, _clean, _is_iter,
                     _tar_dir, _transport_url, output_of, process_event)

__all__ = [
    "AsyncWarden", "AsyncSandbox", "AsyncProcess", "AsyncPty", "AsyncFiles", "AsyncWatchHandle",
    "AsyncResponse",
]

Callback = Callable[[Any], Any]


async def _call(cb: Callable[..., Any] | None, *args: Any) -> None:
    """Calls a callback, awaiting it when it is a coroutine function (or returns an awaitable)."""
    if cb is None:
        return
    r = cb(*args)
    if inspect.isawaitable(r):
        await r


# ---------------------------------------------------------------- processes


class AsyncProcess:
    """A process in a sandbox, with its event stream attached.

    ``async for piece in proc`` yields :class:`ProcessOutput`; ``await proc.wait()`` reads to
    the end. :meth:`disconnect` drops the stream and leaves the process running.
    """

    def __init__(self, sandbox: "AsyncSandbox", resp: AsyncResponse, pid: int = 0, tag: str = "") -> None:
        self.sandbox = sandbox
        self.pid = pid
        self.tag = tag
        self._resp = resp
        self._events = resp.iter_lines()
        self._pending: dict[str, Any] | None = None
        self.result: ExecResult | None = None
        self._closed = False

    async def _start(self) -> None:
        ev = await self._next_event()
        if ev is None:
            raise errors.StreamError("process stream ended before the start event")
        if ev.get("type") != "start":
            self._pending = ev

    async def _next_event(self) -> dict[str, Any] | None:
        if self._pending is not None:
            ev, self._pending = self._pending, None
            return ev
        if self._closed:
            return None
        try:
            ev = await self._events.__anext__()
        except StopAsyncIteration:
            await self.close()
            if self.result is None:
                raise errors.StreamError("process stream ended before the end event") from None
            return None
        except BaseException:
            await self.close()
            raise
        pid, result, err = process_event(ev)
        if pid:
            self.pid = pid
        if result is not None:
            self.result = result
            await self.close()
        if err is not None:
            await self.close()
            raise err
        return ev

    async def events(self) -> AsyncIterator[t.ProcessEvent]:
        """Yields the raw events (``data`` still base64) until the end event."""
        while True:
            ev = await self._next_event()
            if ev is None:
                return
            yield cast(t.ProcessEvent, ev)
            if ev.get("type") == "end":
                return

    async def __aiter__(self) -> AsyncIterator[ProcessOutput]:
        try:
            async for ev in self.events():
                piece = output_of(ev)
                if piece is not None:
                    yield piece
        except asyncio.CancelledError:
            await self.close()
            raise

    async def wait(self, on_stdout: Callback | None = None, on_stderr: Callback | None = None,
                   *, capture: bool = True) -> ExecResult:
        """Reads the stream to its end, calling the callbacks (plain or async) with text."""
        out, err = bytearray(), bytearray()
        async for piece in self:
            if piece.stream == "stderr":
                if capture:
                    err += piece.data
                await _call(on_stderr, piece.text)
            else:
                if capture:
                    out += piece.data
                await _call(on_stdout, piece.text)
        if self.result is None:
            raise errors.StreamError("process stream ended before the end event")
        self.result.stdout_bytes, self.result.stderr_bytes = bytes(out), bytes(err)
        return self.result

    async def send_stdin(self, data: bytes | str) -> None:
        await self.sandbox.send_stdin(self.pid, data)

    async def close_stdin(self) -> None:
        await self.sandbox.close_stdin(self.pid)

    async def signal(self, sig: str = "SIGTERM") -> None:
        await self.sandbox.signal(self.pid, sig)

    async def kill(self) -> None:
        await self.sandbox.signal(self.pid, "SIGKILL")

    async def disconnect(self) -> None:
        """Closes this client's stream; the process keeps running."""
        await self.close()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._resp.aclose()

    async def __aenter__(self) -> "AsyncProcess":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# ---------------------------------------------------------------- watches


class AsyncWatchHandle:
    """A file-system watch; ``async for ev in watch`` yields WatchEvents."""

    def __init__(self, resp: AsyncResponse) -> None:
        self._resp = resp
        self._events = resp.iter_lines()
        self._pending: dict[str, Any] | None = None

    async def _start(self) -> None:
        try:
            first = await self._events.__anext__()
        except StopAsyncIteration:
            return
        if first.get("type") != "start":
            self._pending = first

    async def __aiter__(self) -> AsyncIterator[t.WatchEvent]:
        try:
            if self._pending is not None:
                ev, self._pending = self._pending, None
                if ev.get("type") == "error":
                    raise errors.error_from_event(ev)
                yield cast(t.WatchEvent, ev)
            async for ev in self._events:
                if ev.get("type") == "error":
                    raise errors.error_from_event(ev)
                yield cast(t.WatchEvent, ev)
        finally:
            await self.close()

    async def close(self) -> None:
        await self._resp.aclose()

    async def __aenter__(self) -> "AsyncWatchHandle":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# ---------------------------------------------------------------- terminal


class _AsyncWebSocket:
    """RFC 6455 client frames over asyncio streams (the framing of :mod:`warden._ws`)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._r = reader
        self._w = writer
        self._lock = asyncio.Lock()
        self.closed = False

    @classmethod
    async def connect(cls, tr: AsyncTransport, path: str) -> "_AsyncWebSocket":
        try:
            reader, writer = await asyncio.wait_for(tr._open(), tr.timeout)
        except (OSError, asyncio.TimeoutError) as e:
            raise errors.ConnectionError(f"connect websocket: {e}") from e
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {tr._host()}", "Connection: Upgrade", "Upgrade: websocket",
                 "Sec-WebSocket-Version: 13", f"Sec-WebSocket-Key: {key}"]
        lines += [f"{k}: {v}" for k, v in tr.headers().items() if k.lower() != "accept"]
        try:
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
            status, hdrs = await asyncio.wait_for(tr._head(reader), tr.timeout)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            writer.close()
            raise errors.ConnectionError(f"websocket handshake: {e}") from e
        if status != 101:
            resp = AsyncResponse(reader, writer, status, hdrs, "GET", tr.timeout)
            try:
                raw = await resp.read(64 << 10)
            except errors.WardenError:
                raw = b""
            finally:
                await resp.aclose()
            raise errors.error_from_response(status, hdrs, raw)
        accept = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()
        if hdrs.get("Sec-WebSocket-Accept") != accept:
            writer.close()
            raise errors.ConnectionError("websocket handshake: bad Sec-WebSocket-Accept")
        return cls(reader, writer)

    async def send(self, opcode: int, payload: bytes) -> None:
        head = bytearray([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head.append(0x80 | n)
        elif n < 1 << 16:
            head.append(0x80 | 126)
            head += struct.pack(">H", n)
        else:
            head.append(0x80 | 127)
            head += struct.pack(">Q", n)
        key = os.urandom(4)
        async with self._lock:
            try:
                self._w.write(bytes(head) + key + _mask(payload, key))
                await self._w.drain()
            except OSError as e:
                raise errors.ConnectionError(f"websocket send: {e}") from e

    async def _read(self, n: int) -> bytes:
        try:
            return await self._r.readexactly(n)
        except asyncio.IncompleteReadError as e:
            raise errors.ConnectionError("websocket closed without a close frame") from e
        except OSError as e:
            raise errors.ConnectionError(f"websocket read: {e}") from e

    async def recv(self) -> tuple[int, bytes]:
        """The next data message, answering pings; (OP_CLOSE, payload) at the end."""
        msg_op, parts = None, []
        while True:
            b0, b1 = await self._read(2)
            op, fin = b0 & 0x0F, b0 & 0x80
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", await self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", await self._read(8))[0]
            if n > MAX_FRAME:
                raise errors.StreamError("websocket frame too large")
            key = await self._read(4) if b1 & 0x80 else b""
            data = await self._read(n)
            if key:
                data = _mask(data, key)
            if op == OP_PING:
                await self.send(OP_PONG, data)
                continue
            if op == OP_PONG:
                continue
            if op == OP_CLOSE:
                if not self.closed:
                    self.closed = True
                    try:
                        await self.send(OP_CLOSE, data[:2])
                    except errors.WardenError:
                        pass
                return OP_CLOSE, data
            if op != OP_CONT:
                msg_op = op
            parts.append(data)
            if fin:
                return msg_op or OP_BINARY, b"".join(parts)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                await self.send(OP_CLOSE, struct.pack(">H", 1000))
            except errors.WardenError:
                pass
        self._w.close()
        try:
            await asyncio.wait_for(self._w.wait_closed(), 5)
        except (OSError, asyncio.TimeoutError):
            pass


class AsyncPty:
    """An interactive terminal: ``async for data in pty``, ``await pty.write(...)``."""

    def __init__(self, ws: _AsyncWebSocket) -> None:
        self._ws = ws
        self.exit_code: int | None = None
        self._done = False

    async def write(self, data: bytes | str) -> None:
        await self._ws.send(OP_BINARY, data.encode() if isinstance(data, str) else bytes(data))

    async def resize(self, cols: int, rows: int) -> None:
        await self._ws.send(OP_TEXT, _json.dumps({"type": "resize", "cols": cols, "rows": rows}).encode())

    async def read(self) -> bytes | None:
        """The next output bytes, or None once the terminal has closed."""
        while not self._done:
            op, data = await self._ws.recv()
            if op == OP_BINARY:
                return data
            if op == OP_TEXT:
                try:
                    msg = _json.loads(data)
                except ValueError:
                    continue
                if isinstance(msg, dict) and msg.get("type") == "exit":
                    self.exit_code = int(msg.get("exit_code") or 0)
                continue
            if op == OP_CLOSE:
                self._done = True
        return None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (b := await self.read()) is not None:
            yield b

    async def wait(self, on_data: Callback | None = None) -> int | None:
        """Reads until the terminal closes; returns the exit code."""
        async for b in self:
            await _call(on_data, b)
        return self.exit_code

    async def close(self) -> None:
        self._done = True
        await self._ws.close()

    async def __aenter__(self) -> "AsyncPty":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _aiter_file(f: IO[bytes]) -> AsyncIterator[bytes]:
    while b := await asyncio.to_thread(f.read, CHUNK):
        yield b


# --- BEGIN GENERATED by tools/gen_aio.py from client.py; DO NOT EDIT ---


class _AsyncFilesGen:
    """Files of one sandbox. Paths are absolute or relative to the sandbox's workdir."""

    def __init__(self, sb: '_AsyncSandboxGen') -> None:
        self._sb = sb
        self._tr: AsyncTransport = sb._tr

    def _p(self, suffix: str) -> str:
        return f'/v1/sandboxes/{quote(self._sb.id)}{suffix}'

    async def open(self, path: str, *, user: str | None=None, offset: int=0, length: int | None=None) -> AsyncResponse:
        """Opens a file for streaming reads: ``with sb.files.open(p) as r: r.read(n)``."""
        h = {}
        if offset or length:
            end = '' if length is None else str(offset + length - 1)
            h['Range'] = f'bytes={offset}-{end}'
        return await self._tr.request('GET', self._p('/files'), query={'path': path, 'user': user}, headers=h, accept='application/octet-stream', idempotent=True, stream=True)

    async def read_text(self, path: str, *, user: str | None=None, encoding: str='utf-8') -> str:
        return (await self.read_bytes(path, user=user)).decode(encoding)

    async def read(self, path: str, *, user: str | None=None) -> str:
        return await self.read_text(path, user=user)

    async def write(self, path: str, data: Body, *, mode: int | None=None, user: str | None=None) -> t.Entry:
        """Writes a file, creating parents. ``data`` is str, bytes, a binary file object or
            an iterable of bytes; file objects and iterables are streamed, not loaded."""
        q = {'path': path, 'user': user, 'mode': None if mode is None else format(mode, '04o')}
        return await self._tr.call('PUT', self._p('/files'), query=q, body=data if data is not None else b'', content_type='application/octet-stream', idempotent=not _is_iter(data), stream=True)

    async def remove(self, path: str) -> None:
        await self._tr.call('DELETE', self._p('/files'), query={'path': path}, idempotent=True)

    async def stat(self, path: str) -> t.Entry:
        return await self._tr.call('GET', self._p('/fs/stat'), query={'path': path}, idempotent=True)

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
            return True
        except errors.NotFoundError:
            return False

    async def list(self, path: str, *, depth: int | None=None) -> List[t.Entry]:
        r = await self._tr.call('GET', self._p('/fs/list'), query={'path': path, 'depth': depth}, idempotent=True)
        return list(r.get('entries') or [])

    async def mkdir(self, path: str) -> t.Entry:
        return await self._tr.call('POST', self._p('/fs/mkdir'), json={'path': path})

    async def move(self, source: str, destination: str) -> t.Entry:
        return await self._tr.call('POST', self._p('/fs/move'), json={'source': source, 'destination': destination})

    async def download_archive(self, path: str) -> AsyncResponse:
        """A tar stream of the directory at path; read it and close it."""
        return await self._tr.request('GET', self._p('/archive'), query={'path': path}, accept='application/x-tar', idempotent=True, stream=True)

    async def upload_archive(self, path: str, tar: Body) -> None:
        await self._tr.call('PUT', self._p('/archive'), query={'path': path}, body=tar, content_type='application/x-tar', idempotent=not _is_iter(tar), stream=True)

    async def presign(self, path: str, op: Literal['read', 'write'], *, expires_seconds: int | None=None, user: str | None=None) -> t.PresignResponse:
        return await self._tr.call('POST', self._p('/files/presign'), idempotent=True, json=_clean({'path': path, 'op': op, 'expires_seconds': expires_seconds, 'user': user}))

    async def download_url(self, path: str, *, expires_seconds: int | None=None, user: str | None=None) -> str:
        """A URL that reads the file without an API key until it expires."""
        return self._url((await self.presign(path, 'read', expires_seconds=expires_seconds, user=user))['url'])

    async def upload_url(self, path: str, *, expires_seconds: int | None=None, user: str | None=None) -> str:
        """A URL that accepts a PUT of the file's content without an API key."""
        return self._url((await self.presign(path, 'write', expires_seconds=expires_seconds, user=user))['url'])

    def _url(self, u: str) -> str:
        return u if '://' in u else self._tr.base_url + u

    async def read_bytes(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError  # written in aio.py


class _AsyncSandboxGen:
    """A handle on one sandbox. ``with`` kills it on exit."""

    def __init__(self, client: '_AsyncWardenGen', info: t.Sandbox) -> None:
        self.client = client
        self._tr: AsyncTransport = client._tr
        self.info = info
        self.id: str = info['id']
        self.files = AsyncFiles(self)

    def __repr__(self) -> str:
        return f'Sandbox({self.id!r}, state={self.state!r})'

    @property
    def state(self) -> str:
        return str(self.info.get('state', ''))

    def _p(self, suffix: str='') -> str:
        return f'/v1/sandboxes/{quote(self.id)}{suffix}'

    async def kill(self) -> None:
        await self._tr.call('DELETE', self._p(), idempotent=True)

    async def set_timeout(self, seconds: int) -> t.Sandbox:
        self.info = await self._tr.call('POST', self._p('/timeout'), json={'timeout_seconds': seconds}, idempotent=True)
        return self.info

    async def pause(self) -> t.Sandbox:
        self.info = await self._tr.call('POST', self._p('/pause'), idempotent=True)
        return self.info

    async def resume(self) -> t.Sandbox:
        self.info = await self._tr.call('POST', self._p('/resume'), idempotent=True)
        return self.info

    async def fork(self, count: int | None=None, *, name: str | None=None, timeout_seconds: int | None=None, metadata: Mapping[str, str] | None=None) -> List['AsyncSandbox']:
        """Copies the running sandbox (memory and disk) into ``count`` new ones."""
        body = _clean({'count': count, 'name': name, 'timeout_seconds': timeout_seconds, 'metadata': metadata})
        r = await self._tr.call('POST', self._p('/fork'), json=body)
        return [AsyncSandbox(self.client, s) for s in r.get('sandboxes') or []]

    async def snapshot(self, name: str | None=None, memory: bool | None=None) -> t.Snapshot:
        """Saves the sandbox's files (it keeps running) as a snapshot, named ``name`` or by its id.

            ``memory=True`` also keeps its memory (gvisor): sandboxes from it run on from that moment."""
        return await self._tr.call('POST', self._p('/snapshots'), json=_clean({'name': name, 'memory': memory}))

    async def network(self) -> t.NetworkStatus:
        return await self._tr.call('GET', self._p('/network'), idempotent=True)

    async def set_network(self, mode: Literal['none', 'allowlist', 'open'], allow: Sequence[str | t.NetworkPolicyAllowItem] | None=None) -> t.NetworkStatus:
        """Replaces the network policy; an ``allow`` entry is a rule, or a host name."""
        rules = None if allow is None else [{'host': a} if isinstance(a, str) else dict(cast(Mapping[str, Any], a)) for a in allow]
        return await self._tr.call('PUT', self._p('/network'), json=_clean({'mode': mode, 'allow': rules}), idempotent=True)

    async def usage(self) -> t.Usage:
        return await self._tr.call('GET', self._p('/usage'), idempotent=True)

    async def processes(self) -> List[t.ProcessInfo]:
        return list((await self._tr.call('GET', self._p('/processes'), idempotent=True)).get('processes') or [])

    async def send_stdin(self, pid: int, data: bytes | str) -> None:
        await self._tr.call('POST', self._p(f'/processes/{int(pid)}/stdin'), body=data if data else b'', content_type='application/octet-stream')

    async def close_stdin(self, pid: int) -> None:
        await self._tr.call('POST', self._p(f'/processes/{int(pid)}/close-stdin'), idempotent=True)

    async def signal(self, pid: int, sig: str='SIGTERM') -> None:
        await self._tr.call('POST', self._p(f'/processes/{int(pid)}/signal'), json={'signal': sig})

    async def create_code_context(self, language: str | None=None, *, cwd: str | None=None, user: str | None=None) -> t.CodeContext:
        return await self._tr.call('POST', self._p('/code/contexts'), json=_clean({'language': language, 'cwd': cwd, 'user': user}))

    async def code_contexts(self) -> List[t.CodeContext]:
        return list((await self._tr.call('GET', self._p('/code/contexts'), idempotent=True)).get('contexts') or [])

    async def restart_code_context(self, context_id: str) -> None:
        await self._tr.call('POST', self._p(f'/code/contexts/{quote(context_id)}/restart'))

    async def interrupt_code_context(self, context_id: str) -> None:
        await self._tr.call('POST', self._p(f'/code/contexts/{quote(context_id)}/interrupt'))

    async def delete_code_context(self, context_id: str) -> None:
        await self._tr.call('DELETE', self._p(f'/code/contexts/{quote(context_id)}'))

    async def _git(self, op: str, body: Mapping[str, Any]) -> t.GitResult:
        timeout = self._tr.timeout
        if timeout is not None:
            timeout = max(timeout, float(body.get('timeout_seconds') or 600) + 30)
        return await self._tr.call('POST', self._p(f'/git/{op}'), json=_clean(body), timeout=timeout)

    async def git_clone(self, url: str, path: str | None=None, *, branch: str | None=None, depth: int | None=None, secret: str | None=None, timeout_seconds: int | None=None) -> t.GitResult:
        """Clones an https repository into the sandbox as its default user (``path``: relative
            to the user's home or absolute; default the repository's name). ``secret``, the id of a
            secret you own holding a token, is brokered for the URL's host for this command only:
            the token never enters the sandbox. A git failure is a non-zero ``exit_code`` with the
            tails of git's output, not an exception."""
        return await self._git('clone', {'url': url, 'path': path, 'branch': branch, 'depth': depth, 'secret': secret, 'timeout_seconds': timeout_seconds})

    async def git_pull(self, path: str, *, remote: str | None=None, branch: str | None=None, secret: str | None=None, timeout_seconds: int | None=None) -> t.GitResult:
        """Pulls (fast-forward only) the repository at ``path``; ``secret`` as for :meth:`git_clone`."""
        return await self._git('pull', {'path': path, 'remote': remote, 'branch': branch, 'secret': secret, 'timeout_seconds': timeout_seconds})

    async def git_commit(self, path: str, message: str, *, author_name: str | None=None, author_email: str | None=None, all: bool | None=None, timeout_seconds: int | None=None) -> t.GitResult:
        """Commits in the repository at ``path``, every change staged first unless ``all`` is
            False; an author given is also the committer. The result's ``head`` is the new commit."""
        return await self._git('commit', {'path': path, 'message': message, 'author_name': author_name, 'author_email': author_email, 'all': all, 'timeout_seconds': timeout_seconds})

    async def git_push(self, path: str, *, remote: str | None=None, branch: str | None=None, secret: str | None=None, timeout_seconds: int | None=None) -> t.GitResult:
        """Pushes the repository at ``path`` (``remote`` default origin); ``secret`` as for
            :meth:`git_clone`."""
        return await self._git('push', {'path': path, 'remote': remote, 'branch': branch, 'secret': secret, 'timeout_seconds': timeout_seconds})

    async def git_status(self, path: str) -> t.GitResult:
        """The branch, HEAD, upstream, ahead/behind counts and changed paths of the repository
            at ``path``."""
        return await self._tr.call('GET', self._p('/git/status'), query={'path': path}, idempotent=True)

    async def publish_port(self, port: int, *, public: bool=True) -> t.Port:
        """Makes the port reachable without credentials (``public=False``: private again)."""
        return await self._tr.call('POST', self._p(f'/ports/{int(port)}'), json={'public': public}, idempotent=True)

    async def unpublish_port(self, port: int) -> None:
        await self._tr.call('DELETE', self._p(f'/ports/{int(port)}'), idempotent=True)

    async def preview_url(self, port: int, *, expires_seconds: int | None=None) -> t.PreviewURL:
        return await self._tr.call('POST', self._p(f'/ports/{int(port)}/url'), json=_clean({'expires_seconds': expires_seconds}))

    def proxy_url(self, port: int, path: str='') -> str:
        """The daemon's URL for path on the sandbox's port (send the API key, or use
            :meth:`preview_url` for a signed one)."""
        return f"{self._tr.base_url}/v1/sandboxes/{quote(self.id)}/ports/{int(port)}/proxy/{path.lstrip('/')}"


class _AsyncNS:
    def __init__(self, client: '_AsyncWardenGen') -> None:
        self._c = client
        self._tr: AsyncTransport = client._tr


class _AsyncSandboxesGen(_AsyncNS):
    async def create(self, template: str | None=None, *, name: str | None=None, isolation: str | None=None, cpu_millis: int | None=None, memory_mb: int | None=None, disk_mb: int | None=None, env: Mapping[str, str] | None=None, metadata: Mapping[str, str] | None=None, timeout_seconds: int | None=None, user: str | None=None, workdir: str | None=None, auto_pause: bool | None=None, auto_resume: bool | None=None, sudo: bool | None=None, network: t.NetworkPolicy | None=None, snapshot: str | None=None) -> AsyncSandbox:
        """Creates a sandbox and returns it running. ``with`` kills it on exit."""
        body = _clean({'template': template, 'name': name, 'isolation': isolation, 'cpu_millis': cpu_millis, 'memory_mb': memory_mb, 'disk_mb': disk_mb, 'env': env, 'metadata': metadata, 'timeout_seconds': timeout_seconds, 'user': user, 'workdir': workdir, 'auto_pause': auto_pause, 'auto_resume': auto_resume, 'sudo': sudo, 'network': network, 'snapshot': snapshot})
        return AsyncSandbox(self._c, await self._tr.call('POST', '/v1/sandboxes', json=body))

    async def info(self, ref: str) -> t.Sandbox:
        return await self._tr.call('GET', f'/v1/sandboxes/{quote(ref)}', idempotent=True)

    async def get(self, ref: str) -> AsyncSandbox:
        """A handle on an existing sandbox, by ID or name."""
        return AsyncSandbox(self._c, await self.info(ref))

    connect = get

    async def list_page(self, *, state: str | Sequence[str] | None=None, metadata: Mapping[str, str] | None=None, limit: int | None=None, page_token: str | None=None) -> t.SandboxList:
        q: dict[str, Any] = {'limit': limit, 'page_token': page_token}
        if state:
            q['state'] = state if isinstance(state, str) else ','.join(state)
        if metadata:
            q['metadata'] = ','.join((f'{k}:{v}' for k, v in sorted(metadata.items())))
        return await self._tr.call('GET', '/v1/sandboxes', query=q, idempotent=True)


class _AsyncTemplatesGen(_AsyncNS):
    async def list(self) -> List[t.Template]:
        return list((await self._tr.call('GET', '/v1/templates', idempotent=True)).get('templates') or [])

    async def get(self, name: str) -> t.Template:
        return await self._tr.call('GET', f'/v1/templates/{quote(name)}', idempotent=True)

    async def delete(self, name: str) -> None:
        await self._tr.call('DELETE', f'/v1/templates/{quote(name)}', idempotent=True)

    async def usage(self) -> t.TemplateUsage:
        return await self._tr.call('GET', '/v1/template-store/usage', idempotent=True)

    async def gc(self) -> t.GCReport:
        return await self._tr.call('POST', '/v1/template-store/gc', idempotent=True)


class AsyncSecrets(_AsyncNS):
    async def put(self, name: str, value: str) -> t.Secret:
        """Stores a secret (a new version when the name exists)."""
        return await self._tr.call('POST', '/v1/secrets', json={'name': name, 'value': value})

    async def list(self) -> List[t.Secret]:
        return list((await self._tr.call('GET', '/v1/secrets', idempotent=True)).get('secrets') or [])

    async def revoke(self, id: str) -> None:
        await self._tr.call('POST', f'/v1/secrets/{quote(id)}/revoke', idempotent=True)

    async def delete(self, id: str) -> None:
        await self._tr.call('DELETE', f'/v1/secrets/{quote(id)}', idempotent=True)

    async def grant(self, secret_id: str, *, hosts: Sequence[str] | None=None, sandbox: str | None=None, principal: str | None=None, middleware: str | None=None, header: str | None=None, path_prefix: str | None=None, env_name: str | None=None) -> t.Grant:
        """Lets a sandbox (or a principal's sandboxes) use the secret on the given hosts, or an
            installed middleware read it (``middleware``; ``hosts`` then optional)."""
        body = _clean({'hosts': None if hosts is None else list(hosts), 'sandbox': sandbox, 'principal': principal, 'middleware': middleware, 'header': header, 'path_prefix': path_prefix, 'env_name': env_name})
        return await self._tr.call('POST', f'/v1/secrets/{quote(secret_id)}/grants', json=body)

    async def grants(self, secret_id: str) -> List[t.Grant]:
        return list((await self._tr.call('GET', f'/v1/secrets/{quote(secret_id)}/grants', idempotent=True)).get('grants') or [])

    async def revoke_grant(self, grant_id: str) -> None:
        await self._tr.call('DELETE', f'/v1/grants/{quote(grant_id)}', idempotent=True)


class AsyncKeys(_AsyncNS):
    async def create(self, scopes: Sequence[str], *, principal_id: str | None=None, name: str | None=None) -> t.CreateKeyResponse:
        """Creates an API key; the secret ``key`` is returned only here."""
        return await self._tr.call('POST', '/v1/keys', json=_clean({'scopes': list(scopes), 'principal_id': principal_id, 'name': name}))

    async def list(self) -> List[t.APIKey]:
        return list((await self._tr.call('GET', '/v1/keys', idempotent=True)).get('keys') or [])

    async def revoke(self, id: str) -> None:
        await self._tr.call('DELETE', f'/v1/keys/{quote(id)}', idempotent=True)


class AsyncPrincipals(_AsyncNS):
    async def create(self, name: str, kind: Literal['user', 'agent']='agent') -> t.Principal:
        return await self._tr.call('POST', '/v1/principals', json={'kind': kind, 'name': name})

    async def list(self) -> List[t.Principal]:
        return list((await self._tr.call('GET', '/v1/principals', idempotent=True)).get('principals') or [])


class _AsyncAuditGen(_AsyncNS):
    async def page(self, *, after: int | None=None, limit: int | None=None, target: str | None=None, principal: str | None=None) -> t.AuditList:
        return await self._tr.call('GET', '/v1/audit', query={'after': after, 'limit': limit, 'target': target, 'principal': principal}, idempotent=True)

    async def verify(self) -> t.VerifyReport:
        return await self._tr.call('GET', '/v1/audit/verify', idempotent=True)

    async def anchor(self) -> t.AuditAnchor:
        """Where the retained log starts after audit retention (size 0: nothing deleted)."""
        return await self._tr.call('GET', '/v1/audit/anchor', idempotent=True)


class AsyncPolicies(_AsyncNS):
    async def create(self, policy: t.PolicyWrite | Mapping[str, Any]) -> t.Policy:
        return await self._tr.call('POST', '/v1/policies', json=dict(policy))

    async def list(self) -> List[t.Policy]:
        return list((await self._tr.call('GET', '/v1/policies', idempotent=True)).get('policies') or [])

    async def get(self, id: str, *, version: int | None=None) -> t.Policy:
        return await self._tr.call('GET', f'/v1/policies/{quote(id)}', query={'version': version}, idempotent=True)

    async def update(self, id: str, policy: t.PolicyWrite | Mapping[str, Any]) -> t.Policy:
        return await self._tr.call('PUT', f'/v1/policies/{quote(id)}', json=dict(policy), idempotent=True)

    async def delete(self, id: str) -> None:
        await self._tr.call('DELETE', f'/v1/policies/{quote(id)}', idempotent=True)

    async def test(self, policy: t.PolicyWrite | Mapping[str, Any], *, limit: int | None=None, since: str | None=None, until: str | None=None) -> t.PolicyTestResult:
        """Dry-runs a policy against the audit log."""
        return await self._tr.call('POST', '/v1/policies/test', idempotent=True, json=_clean({'policy': dict(policy), 'limit': limit, 'since': since, 'until': until}))

    async def test_guard(self, *, text: str | None=None, json: Any=None, detectors: Sequence[str] | None=None) -> t.GuardTestResult:
        """Runs the guard's detectors over a text or a JSON value."""
        return await self._tr.call('POST', '/v1/guard/test', idempotent=True, json=_clean({'text': text, 'json': json, 'detectors': list(detectors) if detectors else None}))

    async def eval_guard(self, jsonl: Body, *, split: str | None=None, detectors: Sequence[str] | None=None) -> t.GuardEvalReport:
        """Measures the guard's detectors on labelled JSONL (``{"text", "label", "split"}``
            lines; bytes, a file object or an iterable, streamed)."""
        return await self._tr.call('POST', '/v1/guard/eval', body=jsonl, content_type='application/x-ndjson', query={'split': split, 'detectors': ','.join(detectors) if detectors else None}, idempotent=not _is_iter(jsonl), stream=True)


class AsyncApprovals(_AsyncNS):
    async def list(self, *, state: str | None=None, principal: str | None=None, limit: int | None=None) -> List[t.Approval]:
        r = await self._tr.call('GET', '/v1/approvals', query={'state': state, 'principal': principal, 'limit': limit}, idempotent=True)
        return list(r.get('approvals') or [])

    async def get(self, id: str) -> t.Approval:
        return await self._tr.call('GET', f'/v1/approvals/{quote(id)}', idempotent=True)

    async def approve(self, id: str, reason: str | None=None) -> t.Approval:
        return await self._tr.call('POST', f'/v1/approvals/{quote(id)}/approve', json=_clean({'reason': reason}))

    async def reject(self, id: str, reason: str | None=None) -> t.Approval:
        return await self._tr.call('POST', f'/v1/approvals/{quote(id)}/reject', json=_clean({'reason': reason}))


class AsyncMCP(_AsyncNS):
    """The MCP gateway's administration (scope ``mcp:admin``)."""

    async def create_connector(self, connector: t.MCPConnectorWrite | Mapping[str, Any]) -> t.MCPConnector:
        return await self._tr.call('POST', '/v1/mcp/connectors', json=dict(connector))

    async def connectors(self) -> List[t.MCPConnector]:
        return list((await self._tr.call('GET', '/v1/mcp/connectors', idempotent=True)).get('connectors') or [])

    async def get_connector(self, id: str) -> t.MCPConnector:
        return await self._tr.call('GET', f'/v1/mcp/connectors/{quote(id)}', idempotent=True)

    async def update_connector(self, id: str, connector: t.MCPConnectorWrite | Mapping[str, Any]) -> t.MCPConnector:
        return await self._tr.call('PUT', f'/v1/mcp/connectors/{quote(id)}', json=dict(connector), idempotent=True)

    async def delete_connector(self, id: str) -> None:
        await self._tr.call('DELETE', f'/v1/mcp/connectors/{quote(id)}', idempotent=True)

    async def put_credential(self, connector_id: str, credential: t.MCPCredentialWrite | Mapping[str, Any]) -> t.MCPCredential:
        return await self._tr.call('PUT', f'/v1/mcp/connectors/{quote(connector_id)}/credentials', json=dict(credential), idempotent=True)

    async def delete_credential(self, connector_id: str, *, principal: str | None=None, shared: bool=False) -> None:
        await self._tr.call('DELETE', f'/v1/mcp/connectors/{quote(connector_id)}/credentials', query={'principal': principal, 'shared': shared}, idempotent=True)

    async def create_server(self, server: t.MCPServerWrite | Mapping[str, Any]) -> t.MCPServer:
        return await self._tr.call('POST', '/v1/mcp/servers', json=dict(server))

    async def servers(self) -> List[t.MCPServer]:
        return list((await self._tr.call('GET', '/v1/mcp/servers', idempotent=True)).get('servers') or [])

    async def get_server(self, id: str) -> t.MCPServer:
        return await self._tr.call('GET', f'/v1/mcp/servers/{quote(id)}', idempotent=True)

    async def update_server(self, id: str, server: t.MCPServerWrite | Mapping[str, Any]) -> t.MCPServer:
        return await self._tr.call('PUT', f'/v1/mcp/servers/{quote(id)}', json=dict(server), idempotent=True)

    async def delete_server(self, id: str) -> None:
        await self._tr.call('DELETE', f'/v1/mcp/servers/{quote(id)}', idempotent=True)

    async def grants(self, server_id: str) -> List[t.MCPGrant]:
        return list((await self._tr.call('GET', f'/v1/mcp/servers/{quote(server_id)}/grants', idempotent=True)).get('grants') or [])

    async def grant(self, server_id: str, principal: str) -> t.MCPGrant:
        return await self._tr.call('PUT', f'/v1/mcp/servers/{quote(server_id)}/grants/{quote(principal)}', idempotent=True)

    async def revoke(self, server_id: str, principal: str) -> None:
        await self._tr.call('DELETE', f'/v1/mcp/servers/{quote(server_id)}/grants/{quote(principal)}', idempotent=True)

    async def tools(self, *, state: str | None=None, connector: str | None=None, tool: str | None=None) -> List[t.MCPTool]:
        r = await self._tr.call('GET', '/v1/mcp/tools', query={'state': state, 'connector': connector, 'tool': tool}, idempotent=True)
        return list(r.get('tools') or [])

    async def approve_tool(self, connector: str, tool: str, hash: str) -> t.MCPTool:
        return await self._tr.call('POST', f'/v1/mcp/tools/{quote(connector)}/{quote(tool)}/{quote(hash)}/approve')

    async def start_oauth(self, connector_id: str, request: t.MCPOAuthRequest | Mapping[str, Any] | None=None) -> t.MCPOAuthStart:
        """Starts a connector's OAuth authorization; returns where to send the user."""
        return await self._tr.call('POST', f'/v1/mcp/connectors/{quote(connector_id)}/oauth', json=dict(request or {}))

    async def reject_tool(self, connector: str, tool: str, hash: str) -> t.MCPTool:
        return await self._tr.call('POST', f'/v1/mcp/tools/{quote(connector)}/{quote(tool)}/{quote(hash)}/reject')


class _AsyncAgentsGen(_AsyncNS):
    """Hosted agents: definitions, runs, triggers and their memory."""

    async def create(self, spec: t.AgentSpec | Mapping[str, Any]) -> t.Agent:
        return await self._tr.call('POST', '/v1/agents', json=dict(spec))

    async def list(self) -> List[t.Agent]:
        return list((await self._tr.call('GET', '/v1/agents', idempotent=True)).get('agents') or [])

    async def get(self, name: str) -> t.Agent:
        return await self._tr.call('GET', f'/v1/agents/{quote(name)}', idempotent=True)

    async def update(self, name: str, spec: t.AgentSpec | Mapping[str, Any]) -> t.Agent:
        return await self._tr.call('PUT', f'/v1/agents/{quote(name)}', json=dict(spec), idempotent=True)

    async def delete(self, name: str) -> None:
        await self._tr.call('DELETE', f'/v1/agents/{quote(name)}', idempotent=True)

    async def versions(self, name: str) -> List[t.AgentVersion]:
        return list((await self._tr.call('GET', f'/v1/agents/{quote(name)}/versions', idempotent=True)).get('versions') or [])

    async def run(self, name: str, input: Any=None) -> t.AgentRun:
        """Starts a run; returns it queued."""
        return await self._tr.call('POST', f'/v1/agents/{quote(name)}/runs', json=_clean({'input': input}))

    async def runs(self, name: str, *, state: str | None=None, limit: int | None=None) -> List[t.AgentRun]:
        r = await self._tr.call('GET', f'/v1/agents/{quote(name)}/runs', query={'state': state, 'limit': limit}, idempotent=True)
        return list(r.get('runs') or [])

    async def webhook(self, name: str, payload: Any) -> t.AgentWebhookResponse:
        return await self._tr.call('POST', f'/v1/agents/{quote(name)}/webhook', json=payload)

    async def get_run(self, run_id: str) -> t.AgentRun:
        return await self._tr.call('GET', f'/v1/agent-runs/{quote(run_id)}', idempotent=True)

    async def cancel_run(self, run_id: str) -> t.AgentRun:
        return await self._tr.call('POST', f'/v1/agent-runs/{quote(run_id)}/cancel')

    async def reply(self, run_id: str, text: str) -> t.ReplyAgentRunResponse:
        """Posts text in the Slack thread that started the run (while it runs)."""
        return await self._tr.call('POST', f'/v1/agent-runs/{quote(run_id)}/reply', json={'text': text})

    async def forward_slack_event(self, name: str, body: bytes, headers: Mapping[str, str]) -> t.AgentSlackEventsResponse:
        """Relays a Slack Events API request, raw body and Slack's signature headers untouched,
            to the agent's Slack endpoint (no API key is sent: the daemon checks Slack's signature)."""
        tr = AsyncTransport(_transport_url(self._tr), api_key='', timeout=self._tr.timeout, retry=self._tr.retry, ssl_context=self._tr.ssl_context)
        return await tr.call('POST', f'/v1/agents/{quote(name)}/slack/events', body=bytes(body), content_type='application/json', headers=dict(headers))

    async def memory(self, name: str, *, prefix: str | None=None, tag: str | None=None, q: str | None=None, limit: int | None=None) -> List[t.MemoryEntry]:
        r = await self._tr.call('GET', f'/v1/agents/{quote(name)}/memory', query={'prefix': prefix, 'tag': tag, 'q': q, 'limit': limit}, idempotent=True)
        return list(r.get('entries') or [])

    async def memory_entry(self, name: str, key: str) -> t.GetMemoryResponse:
        return await self._tr.call('GET', f'/v1/agents/{quote(name)}/memory/entry', query={'key': key}, idempotent=True)

    async def memory_diff(self, name: str, key: str, *, from_version: int | None=None, to_version: int | None=None) -> t.MemoryDiff:
        return await self._tr.call('GET', f'/v1/agents/{quote(name)}/memory/diff', query={'key': key, 'from': from_version, 'to': to_version}, idempotent=True)

    async def memory_redact(self, name: str, request: t.RedactMemoryRequest | Mapping[str, Any]) -> t.RedactMemoryResponse:
        return await self._tr.call('POST', f'/v1/agents/{quote(name)}/memory/redact', json=dict(request))


class AsyncVolumes(_AsyncNS):
    """Persistent volumes, mountable into sandboxes."""

    async def create(self, spec: t.VolumeCreate | Mapping[str, Any]) -> t.Volume:
        return await self._tr.call('POST', '/v1/volumes', json=dict(spec))

    async def list(self) -> List[t.Volume]:
        return list((await self._tr.call('GET', '/v1/volumes', idempotent=True)).get('volumes') or [])

    async def get(self, name: str) -> t.Volume:
        return await self._tr.call('GET', f'/v1/volumes/{quote(name)}', idempotent=True)

    async def delete(self, name: str) -> None:
        await self._tr.call('DELETE', f'/v1/volumes/{quote(name)}', idempotent=True)

    async def resize(self, name: str, request: t.VolumeResize | Mapping[str, Any]) -> t.Volume:
        return await self._tr.call('POST', f'/v1/volumes/{quote(name)}/resize', json=dict(request))

    async def open(self, name: str, path: str) -> AsyncResponse:
        """A file of the volume as a stream."""
        return await self._tr.request('GET', f'/v1/volumes/{quote(name)}/files', query={'path': path}, accept='application/octet-stream', idempotent=True, stream=True)

    async def write(self, name: str, path: str, data: Body, *, mode: int | None=None) -> t.WriteVolumeFileResponse:
        q = {'path': path, 'mode': None if mode is None else format(mode, '04o')}
        return await self._tr.call('PUT', f'/v1/volumes/{quote(name)}/files', query=q, body=data if data is not None else b'', content_type='application/octet-stream', idempotent=not _is_iter(data), stream=True)

    async def snapshot(self, name: str, snapshot: str | None=None) -> t.VolumeSnapshot:
        """Takes a point-in-time copy of volume ``name``, mounted by a sandbox or not (a mounted
            one is frozen for the copy), named ``snapshot`` (default ``snap-<time>``)."""
        return await self._tr.call('POST', f'/v1/volumes/{quote(name)}/snapshots', json=_clean({'name': snapshot}))

    async def snapshots(self, name: str) -> List[t.VolumeSnapshot]:
        """The volume's snapshots, oldest first."""
        return list((await self._tr.call('GET', f'/v1/volumes/{quote(name)}/snapshots', idempotent=True)).get('snapshots') or [])

    async def delete_snapshot(self, name: str, snapshot: str) -> None:
        await self._tr.call('DELETE', f'/v1/volumes/{quote(name)}/snapshots/{quote(snapshot)}', idempotent=True)

    async def restore(self, name: str, snapshot: str) -> t.Volume:
        """Replaces the volume's files with those of one of its snapshots, atomically; refused
            (ConflictError) while a live sandbox mounts the volume."""
        return await self._tr.call('POST', f'/v1/volumes/{quote(name)}/restore', json={'snapshot': snapshot}, idempotent=True)

    async def create_from_snapshot(self, name: str, volume: str, snapshot: str) -> t.Volume:
        """Makes volume ``name`` holding the files of ``snapshot`` of your volume ``volume``, of
            the snapshot's size (shorthand for :meth:`create` with ``from_snapshot``)."""
        return await self.create({'name': name, 'from_snapshot': {'volume': volume, 'snapshot': snapshot}})


class AsyncWebhooks(_AsyncNS):
    """Outgoing webhooks: endpoints that receive the audit events they name, signed in the
    Standard Webhooks format (scope webhooks:admin)."""

    async def list(self) -> List[t.Webhook]:
        """The endpoints (the config file's first, then the API's) with their delivery state."""
        return list((await self._tr.call('GET', '/v1/webhooks', idempotent=True)).get('webhooks') or [])

    async def get(self, name: str) -> t.Webhook:
        return await self._tr.call('GET', f'/v1/webhooks/{quote(name)}', idempotent=True)

    async def create(self, webhook: t.WebhookWrite | Mapping[str, Any]) -> t.Webhook:
        """Adds an endpoint; it gets the events written from now on."""
        return await self._tr.call('POST', '/v1/webhooks', json=dict(webhook))

    async def update(self, name: str, webhook: t.WebhookWrite | Mapping[str, Any]) -> t.Webhook:
        """Replaces an API-made endpoint's definition; it keeps its place in the log."""
        return await self._tr.call('PUT', f'/v1/webhooks/{quote(name)}', json=dict(webhook), idempotent=True)

    async def delete(self, name: str) -> None:
        """Stops and removes an API-made endpoint."""
        await self._tr.call('DELETE', f'/v1/webhooks/{quote(name)}', idempotent=True)

    async def test(self, name: str) -> t.WebhookTestResult:
        """Sends a signed ``webhook.test`` ping now and reports what the receiver answered (a
            refusal is ``ok`` False, not an exception)."""
        return await self._tr.call('POST', f'/v1/webhooks/{quote(name)}/test')


class AsyncMiddleware(_AsyncNS):
    """Request middleware of the guard (docs/guardrails.md)."""

    async def list(self) -> List[t.Middleware]:
        return list((await self._tr.call('GET', '/v1/middleware', idempotent=True)).get('middleware') or [])

    async def get(self, name: str) -> t.Middleware:
        return await self._tr.call('GET', f'/v1/middleware/{quote(name)}', idempotent=True)

    async def put(self, name: str, spec: t.MiddlewareWrite | Mapping[str, Any]) -> t.Middleware:
        return await self._tr.call('PUT', f'/v1/middleware/{quote(name)}', json=dict(spec), idempotent=True)

    async def delete(self, name: str) -> None:
        await self._tr.call('DELETE', f'/v1/middleware/{quote(name)}', idempotent=True)

    async def test(self, request: t.MiddlewareTestRequest | Mapping[str, Any]) -> t.MiddlewareVerdict:
        return await self._tr.call('POST', '/v1/middleware/test', json=dict(request), idempotent=True)


class AsyncMonitor(_AsyncNS):
    """The agent monitor: ingested agent events."""

    async def ingest(self, request: t.MonitorIngestRequest | Mapping[str, Any]) -> t.MonitorIngestResult:
        return await self._tr.call('POST', '/v1/monitor/events', json=dict(request))

    async def events(self, **query: Any) -> t.MonitorList:
        """One page of events; filters: agent, principal, sandbox, session, kind, since, until,
            cursor, limit, wait."""
        return await self._tr.call('GET', '/v1/monitor/events', query=query, idempotent=True)

    async def get(self, id: str) -> t.MonitorEvent:
        return await self._tr.call('GET', f'/v1/monitor/events/{quote(id)}', idempotent=True)

    async def redact(self, id: str) -> t.MonitorEvent:
        return await self._tr.call('POST', f'/v1/monitor/events/{quote(id)}/redact', idempotent=True)

    async def claude_code_hook(self, payload: t.ClaudeCodeHookInput | Mapping[str, Any]) -> t.ClaudeCodeHookOutput:
        return await self._tr.call('POST', '/v1/monitor/hooks/claude-code', json=dict(payload))


class AsyncLLM(_AsyncNS):
    """The LLM gateway's prices and budgets."""

    async def prices(self) -> t.LLMPrices:
        return await self._tr.call('GET', '/v1/llm/prices', idempotent=True)

    async def set_prices(self, prices: t.LLMPrices | Mapping[str, Any]) -> t.LLMPrices:
        return await self._tr.call('PUT', '/v1/llm/prices', json=dict(prices), idempotent=True)

    async def reset_prices(self) -> t.LLMPrices:
        return await self._tr.call('DELETE', '/v1/llm/prices', idempotent=True)

    async def budgets(self) -> t.LLMBudgets:
        return await self._tr.call('GET', '/v1/llm/budgets', idempotent=True)

    async def set_budgets(self, budgets: t.LLMBudgets | Mapping[str, Any]) -> t.LLMBudgets:
        return await self._tr.call('PUT', '/v1/llm/budgets', json=dict(budgets), idempotent=True)

    async def reset_budgets(self) -> t.LLMBudgets:
        return await self._tr.call('DELETE', '/v1/llm/budgets', idempotent=True)


class AsyncSnapshots(_AsyncNS):
    """Filesystem snapshots of sandboxes: list, get, delete, promote to a template."""

    async def list(self, *, sandbox: str | None=None) -> List[t.Snapshot]:
        """Your snapshots, oldest first (``sandbox``: those of one sandbox)."""
        r = await self._tr.call('GET', '/v1/snapshots', query={'sandbox': sandbox}, idempotent=True)
        return list(r.get('snapshots') or [])

    async def get(self, name: str) -> t.Snapshot:
        return await self._tr.call('GET', f'/v1/snapshots/{quote(name)}', idempotent=True)

    async def delete(self, name: str) -> None:
        await self._tr.call('DELETE', f'/v1/snapshots/{quote(name)}', idempotent=True)

    async def promote(self, name: str, template: str) -> t.Template:
        """Makes (or re-points) template ``name[:tag]`` at the snapshot."""
        return await self._tr.call('POST', f'/v1/snapshots/{quote(name)}/promote', json={'template': template})


class _AsyncWardenGen:
    """A client of one Warden daemon.

    ``base_url`` is http(s)://host:port or unix:///path/to/socket; without it the client
    uses $WARDEN_URL, then the daemon's unix socket when it is there, then
    http://127.0.0.1:7070. ``api_key`` defaults to $WARDEN_API_KEY, then the daemon's first
    admin key (/var/lib/warden/admin.key) when readable, like the CLI. ``timeout`` (seconds)
    bounds connecting and waiting for each response (streams then run as long as they last).
    Idempotent calls are retried on 429 and 503 as ``retry`` allows."""

    def __init__(self, base_url: str | None=None, api_key: str | None=None, *, timeout: float | None=120.0, retry: RetryPolicy | None=None, ssl_context: ssl.SSLContext | None=None) -> None:
        self._tr = AsyncTransport(base_url, api_key, timeout=timeout, retry=retry, ssl_context=ssl_context)
        self.sandboxes = AsyncSandboxes(self)
        self.templates = AsyncTemplates(self)
        self.secrets = AsyncSecrets(self)
        self.keys = AsyncKeys(self)
        self.principals = AsyncPrincipals(self)
        self.audit = AsyncAudit(self)
        self.policies = AsyncPolicies(self)
        self.approvals = AsyncApprovals(self)
        self.mcp = AsyncMCP(self)
        self.agents = AsyncAgents(self)
        self.volumes = AsyncVolumes(self)
        self.middleware = AsyncMiddleware(self)
        self.monitor = AsyncMonitor(self)
        self.llm = AsyncLLM(self)
        self.snapshots = AsyncSnapshots(self)
        self.webhooks = AsyncWebhooks(self)

    @property
    def base_url(self) -> str:
        return self._tr.base_url

    async def health(self) -> t.Health:
        return await self._tr.call('GET', '/healthz', idempotent=True)

    async def whoami(self) -> t.Whoami:
        return await self._tr.call('GET', '/v1/whoami', idempotent=True)

    async def usage(self, *, group_by: str | None=None, since: str | None=None, until: str | None=None, principal: str | None=None, agent: str | None=None) -> t.UsageReport:
        """The usage report (sandbox resources and LLM tokens)."""
        return await self._tr.call('GET', '/v1/usage', query={'group_by': group_by, 'since': since, 'until': until, 'principal': principal, 'agent': agent}, idempotent=True)

    async def close(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError  # written in aio.py


# --- END GENERATED ---


# ---------------------------------------------------------------- hand-written parts


class AsyncFiles(_AsyncFilesGen):
    async def read_bytes(self, path: str, *, user: str | None = None) -> bytes:
        async with await self.open(path, user=user) as r:
            return await r.read()

    async def iter_bytes(self, path: str, *, user: str | None = None, chunk: int = CHUNK) -> AsyncIterator[bytes]:
        """Yields a file's content in chunks, never holding more than one."""
        async with await self.open(path, user=user) as r:
            async for b in r.iter_bytes(chunk):
                yield b

    async def download(self, path: str, dest: str | os.PathLike[str] | BinaryIO, *, user: str | None = None) -> int:
        """Streams a file to a local path or binary file object; returns the bytes copied."""
        n = 0
        async with await self.open(path, user=user) as r:
            f: Any = open(dest, "wb") if isinstance(dest, (str, os.PathLike)) else dest  # noqa: SIM115
            try:
                async for c in r.iter_bytes():
                    f.write(c)
                    n += len(c)
            finally:
                if f is not dest:
                    f.close()
        return n

    async def upload(self, path: str, src: str | os.PathLike[str], *, mode: int | None = None,
                     user: str | None = None) -> t.Entry:
        """Streams a local file into the sandbox (read off the event loop)."""
        with open(src, "rb") as f:
            q = {"path": path, "user": user, "mode": None if mode is None else format(mode, "04o")}
            return cast(t.Entry, await self._tr.call("PUT", self._p("/files"), query=q, body=_aiter_file(f),
                                                     content_type="application/octet-stream", stream=True))

    async def watch(self, path: str, *, recursive: bool = False) -> AsyncWatchHandle:
        """Watches a directory; returns once the watch is in place."""
        r = await self._tr.request("GET", self._p("/fs/watch"), query={"path": path, "recursive": recursive},
                                   accept="application/x-ndjson", idempotent=True, stream=True)
        w = AsyncWatchHandle(r)
        try:
            await w._start()
        except BaseException:
            await w.close()
            raise
        return w


class AsyncSandbox(_AsyncSandboxGen):
    """A sandbox; ``async with`` kills it on exit."""

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.kill()
        except (errors.NotFoundError, errors.ConflictError):
            pass

    async def refresh(self) -> t.Sandbox:
        self.info = await self.client.sandboxes.info(self.id)
        return self.info

    async def logs(self, *, pid: int | None = None, follow: bool = False) -> AsyncIterator[t.LogEvent]:
        """Yields the output the agent kept of the sandbox's processes (``data`` is base64)."""
        async with await self._tr.request("GET", self._p("/logs"), query={"pid": pid, "follow": follow},
                                          accept="application/x-ndjson", idempotent=True, stream=True) as r:
            async for ev in r.iter_lines():
                if ev.get("stream") == "error":
                    raise errors.error_from_event(ev)
                yield cast(t.LogEvent, ev)

    async def start(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                    user: str | None = None, stdin: bool = False, tag: str | None = None,
                    timeout_seconds: int | None = None) -> AsyncProcess:
        """Starts a process and returns it with its stream attached. A str is a shell line
        (``bash -lc``), a sequence an argv."""
        body: dict[str, Any] = {"cmd": list(cmd)} if not isinstance(cmd, str) else {"command": cmd}
        body.update(_clean({"env": env, "cwd": cwd, "user": user, "tag": tag, "timeout_seconds": timeout_seconds}))
        if stdin:
            body["stdin"] = True
        r = await self._tr.request("POST", self._p("/exec"), json=body, accept="application/x-ndjson", stream=True)
        p = AsyncProcess(self, r, tag=tag or "")
        try:
            await p._start()
        except BaseException:
            await p.close()
            raise
        return p

    async def exec(self, cmd: str | Sequence[str], *, on_stdout: Callback | None = None,
                   on_stderr: Callback | None = None, input: bytes | str | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None, user: str | None = None,
                   timeout_seconds: int | None = None, capture: bool = True) -> ExecResult:
        """Runs a command to its end, streaming output to the callbacks (plain or async), and
        returns how it ended. ``input`` is written to its stdin, then closed."""
        async with await self.start(cmd, env=env, cwd=cwd, user=user, stdin=input is not None,
                                    timeout_seconds=timeout_seconds) as p:
            feeder = None
            if input is not None:
                data = input.encode() if isinstance(input, str) else input

                async def feed() -> None:
                    try:
                        for i in range(0, len(data), CHUNK):
                            await p.send_stdin(data[i:i + CHUNK])
                        await p.close_stdin()
                    except (errors.ConflictError, errors.NotFoundError):
                        pass  # the process exited before reading all of it
                feeder = asyncio.create_task(feed())
            try:
                res = await p.wait(on_stdout, on_stderr, capture=capture)
            except BaseException:
                if feeder is not None:
                    feeder.cancel()
                raise
            if feeder is not None:
                await feeder
            return res

    async def attach(self, pid: int, *, replay: bool = True) -> AsyncProcess:
        """Attaches to a process started earlier (by any client)."""
        r = await self._tr.request("GET", self._p(f"/processes/{int(pid)}/stream"), query={"replay": replay},
                                   accept="application/x-ndjson", idempotent=True, stream=True)
        return AsyncProcess(self, r, pid=pid)

    async def pty(self, cmd: str | None = None, args: Sequence[str] = (), *, cols: int = 80, rows: int = 24,
                  user: str | None = None) -> AsyncPty:
        """Opens an interactive terminal running cmd (default /bin/bash)."""
        q = {"cols": cols, "rows": rows, "cmd": cmd, "arg": list(args), "user": user}
        return AsyncPty(await _AsyncWebSocket.connect(self._tr, self._tr.url(self._p("/pty"), q)))

    async def run_code(self, code: str, *, language: str | None = None, context_id: str | None = None,
                       env: Mapping[str, str] | None = None, timeout_seconds: int | None = None,
                       user: str | None = None, on_stdout: Callback | None = None,
                       on_stderr: Callback | None = None, on_result: Callable[[CodeResult], Any] | None = None,
                       on_error: Callable[[CodeError], Any] | None = None) -> Execution:
        """Runs a cell in a stateful interpreter and returns its results."""
        body = _clean({"code": code, "language": language, "context_id": context_id, "env": env,
                       "timeout_seconds": timeout_seconds, "user": user})
        run = CodeRun(on_stdout, on_stderr, on_result, on_error)
        async with await self._tr.request("POST", self._p("/code/run"), json=body, accept="application/x-ndjson",
                                          stream=True) as r:
            async for ev in r.iter_lines():
                done = run.feed(ev)
                for aw in run.returned:
                    if inspect.isawaitable(aw):
                        await aw
                if done:
                    return run.execution
        raise errors.StreamError("code run ended before end_of_execution")


class AsyncSandboxes(_AsyncSandboxesGen):
    async def list(self, *, state: str | Sequence[str] | None = None,
                   metadata: Mapping[str, str] | None = None) -> AsyncIterator[t.Sandbox]:
        """Yields every visible sandbox, following pages."""
        token = None
        while True:
            page = await self.list_page(state=state, metadata=metadata, page_token=token)
            for s in page.get("sandboxes") or []:
                yield s
            nxt = page.get("next_page_token") or None
            if not nxt or nxt == token:
                return
            token = nxt

    async def kill(self, ref: str) -> None:
        await AsyncSandbox(self._c, cast(t.Sandbox, {"id": ref})).kill()


class AsyncTemplates(_AsyncTemplatesGen):
    async def _events(self, r: AsyncResponse, on_event: Callable[[t.TemplateEvent], Any] | None) -> t.TemplateEvent:
        result = None
        async with r:
            async for ev in r.iter_lines():
                await _call(on_event, cast(t.TemplateEvent, ev))
                if ev.get("type") == "error":
                    raise errors.error_from_event(ev)
                if ev.get("type") == "result":
                    result = ev
        if result is None:
            raise errors.StreamError("template stream ended before its result")
        return cast(t.TemplateEvent, result)

    async def build(self, name: str, context: Body | str | os.PathLike[str], *, dockerfile: str | None = None,
                    build_args: Mapping[str, str] | None = None, no_cache: bool = False, network: str | None = None,
                    allow: Sequence[str] | None = None, cpu_millis: int | None = None, memory_mb: int | None = None,
                    disk_mb: int | None = None, on_event: Callable[[t.TemplateEvent], Any] | None = None,
                    on_log: Callable[[str], Any] | None = None) -> dict[str, Any]:
        """Builds a template from a build context (a directory, or a tar as bytes, a file
        object or an async iterable); streams events and RUN output lines to the callbacks."""
        body: Any = context
        if isinstance(context, (str, os.PathLike)) and os.path.isdir(context):
            body = _tar_dir(os.fspath(context))
        q = {"name": name, "dockerfile": dockerfile, "no_cache": no_cache, "network": network,
             "allow": ",".join(allow) if allow else None, "cpu_millis": cpu_millis, "memory_mb": memory_mb,
             "disk_mb": disk_mb, "build_arg": [f"{k}={v}" for k, v in (build_args or {}).items()]}

        async def each(ev: t.TemplateEvent) -> None:
            await _call(on_event, ev)
            if ev.get("type") == "log":
                await _call(on_log, str(ev.get("text", "")))
        r = await self._tr.request("POST", "/v1/templates/build", query=q, body=body, content_type="application/x-tar",
                                   accept="application/x-ndjson", stream=True)
        res = await self._events(r, each)
        return cast(dict[str, Any], res.get("build") or res)

    async def import_image(self, name: str, image: str, *, username: str | None = None, password: str | None = None,
                           token: str | None = None, platform: str | None = None, start: bool | None = None,
                           on_event: Callable[[t.TemplateEvent], Any] | None = None) -> t.Template:
        """Imports an OCI or Docker image from a registry."""
        body = _clean({"name": name, "image": image, "username": username, "password": password, "token": token,
                       "platform": platform, "start": start})
        r = await self._tr.request("POST", "/v1/templates/import", json=body, accept="application/x-ndjson",
                                   stream=True)
        return cast(t.Template, (await self._events(r, on_event)).get("template"))

    async def import_archive(self, name: str, archive: Body, *, format: str | None = None, tag: str | None = None,
                             platform: str | None = None, start: bool = False,
                             on_event: Callable[[t.TemplateEvent], Any] | None = None) -> t.Template:
        """Imports an image from a docker-save or OCI-layout tar (streamed)."""
        q = {"name": name, "format": format, "tag": tag, "platform": platform, "start": start}
        r = await self._tr.request("POST", "/v1/templates/import", query=q, body=archive,
                                   content_type="application/x-tar", accept="application/x-ndjson", stream=True)
        return cast(t.Template, (await self._events(r, on_event)).get("template"))


class AsyncAudit(_AsyncAuditGen):
    async def events(self, *, after: int = 0, target: str | None = None,
                     principal: str | None = None) -> AsyncIterator[t.AuditEvent]:
        """Yields every audit event after seq ``after``, following pages."""
        while True:
            pg = await self.page(after=after, target=target, principal=principal)
            evs = pg.get("events") or []
            for ev in evs:
                yield ev
            nxt = int(pg.get("next_after") or 0)
            if not evs or nxt <= after:
                return
            after = nxt


class AsyncAgents(_AsyncAgentsGen):
    async def wait_run(self, run_id: str, *, timeout: float = 600.0, poll: float = 0.5) -> t.AgentRun:
        """Polls a run until it has ended and returns it; raises TimeoutError after ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            r = await self.get_run(run_id)
            if r["state"] in RUN_ENDED:
                return r
            if loop.time() >= deadline:
                raise TimeoutError(f"agent run {run_id} still {r['state']} after {timeout} s")
            await asyncio.sleep(poll)

    async def run_logs(self, run_id: str, *, follow: bool = False) -> AsyncIterator[t.AgentLogLine]:
        """Yields a run's log lines; with follow, until the run ends."""
        async with await self._tr.request("GET", f"/v1/agent-runs/{quote(run_id)}/logs", query={"follow": follow},
                                          accept="application/x-ndjson", idempotent=True, stream=True) as r:
            async for ev in r.iter_lines():
                yield cast(t.AgentLogLine, ev)

    async def memory_export(self, name: str) -> AsyncIterator[t.MemoryEntry]:
        """Yields every memory entry of the agent, with its versions."""
        async with await self._tr.request("GET", f"/v1/agents/{quote(name)}/memory/export",
                                          accept="application/x-ndjson", idempotent=True, stream=True) as r:
            async for ev in r.iter_lines():
                yield cast(t.MemoryEntry, ev)


class AsyncWarden(_AsyncWardenGen):
    """The asyncio client; the constructor takes :class:`warden.Warden`'s arguments.
    ``async with`` closes it."""

    async def __aenter__(self) -> "AsyncWarden":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Releases the client (it holds no pooled connections: each call has its own)."""

    aclose = close

    async def create_sandbox(self, template: str | None = None, **kw: Any) -> AsyncSandbox:
        """Shorthand for ``client.sandboxes.create``."""
        return await self.sandboxes.create(template, **kw)

    async def sandbox(self, ref: str) -> AsyncSandbox:
        """Shorthand for ``client.sandboxes.get``."""
        return await self.sandboxes.get(ref)

    async def metrics(self) -> str:
        """The Prometheus metrics, as text (scope metrics:read)."""
        async with await self._tr.request("GET", "/metrics", accept="text/plain", idempotent=True) as r:
            return (await r.read()).decode()

    async def openapi(self) -> str:
        """The daemon's OpenAPI document, as YAML text."""
        async with await self._tr.request("GET", "/v1/openapi.yaml", accept="application/yaml",
                                          idempotent=True) as r:
            return (await r.read()).decode()

    def _presigned_transport(self, url: str) -> tuple[AsyncTransport, str]:
        import urllib.parse as up
        u = up.urlsplit(url)
        base = _transport_url(self._tr)
        if u.scheme in ("http", "https") and u.netloc:
            base = f"{u.scheme}://{u.netloc}"
        tr = AsyncTransport(base, api_key="", timeout=self._tr.timeout, retry=self._tr.retry,
                            ssl_context=self._tr.ssl_context)
        return tr, u.path + ("?" + u.query if u.query else "")

    async def read_presigned(self, url: str) -> AsyncResponse:
        """Opens a presigned read URL (no API key is sent) as a stream."""
        tr, path = self._presigned_transport(url)
        return await tr.request("GET", path, accept="*/*", idempotent=True, stream=True)

    async def write_presigned(self, url: str, data: Body) -> t.Entry:
        """Uploads data (streamed) to a presigned write URL (no API key is sent)."""
        tr, path = self._presigned_transport(url)
        return cast(t.Entry, await tr.call("PUT", path, body=data, content_type="application/octet-stream",
                                           accept="*/*", idempotent=not _is_iter(data), stream=True))


# Keep names used only by the generated part importable for type checkers.
_ = (RetryPolicy, ssl, Literal, Awaitable)
