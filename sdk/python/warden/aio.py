"""The asyncio client: :class:`AsyncWarden` has the synchronous client's API with every call
awaitable and every stream an async iterator.

Each blocking step (a call, or one read of a stream) runs in a worker thread through
:func:`asyncio.to_thread`, over the same standard-library transport as :class:`warden.Warden`:
the event loop never blocks, and no third-party HTTP library is needed. Cancelling a task
that awaits a stream closes the stream.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any, AsyncIterator, Callable, Iterator

from . import client as _c
from ._http import Response
from .client import Files, Process, Pty, Sandbox, WatchHandle, Warden, _NS

__all__ = ["AsyncWarden", "AsyncSandbox", "AsyncProcess", "AsyncPty", "AsyncStream"]

_DONE = object()


def _next(it: Iterator[Any]) -> Any:
    return next(it, _DONE)


class AsyncStream:
    """An async iterator over a blocking iterator; ``aclose`` (or ``async with``) closes it."""

    def __init__(self, it: Iterator[Any], wrap: Callable[[Any], Any] = lambda x: x,
                 on_close: Callable[[], Any] | None = None) -> None:
        self._it = it
        self._wrap = wrap
        self._on_close = on_close

    def __aiter__(self) -> "AsyncStream":
        return self

    async def __anext__(self) -> Any:
        try:
            v = await asyncio.to_thread(_next, self._it)
        except asyncio.CancelledError:
            await self.aclose()
            raise
        if v is _DONE:
            raise StopAsyncIteration
        return self._wrap(v)

    async def aclose(self) -> None:
        if self._on_close is not None:
            await asyncio.to_thread(self._on_close)
        close = getattr(self._it, "close", None)
        if close is not None:
            try:
                close()
            except (ValueError, RuntimeError):  # a generator running in a thread
                pass

    async def __aenter__(self) -> "AsyncStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _wrap(v: Any) -> Any:
    if isinstance(v, Sandbox):
        return AsyncSandbox(v)
    if isinstance(v, Process):
        return AsyncProcess(v)
    if isinstance(v, Pty):
        return AsyncPty(v)
    if isinstance(v, WatchHandle):
        return AsyncStream(iter(v), on_close=v.close)
    if isinstance(v, Response):
        return AsyncResponse(v)
    if isinstance(v, types.GeneratorType):
        return AsyncStream(v)
    if isinstance(v, list) and v and isinstance(v[0], Sandbox):
        return [AsyncSandbox(x) for x in v]
    return v


class _AsyncProxy:
    """Exposes every method of the wrapped object as a coroutine function."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if isinstance(attr, (Files, _NS)):
            return _AsyncProxy(attr)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kw: Any) -> Any:
            res = await asyncio.to_thread(attr, *args, **kw)
            return _wrap(res)
        call.__name__ = name
        call.__doc__ = getattr(attr, "__doc__", None)
        return call


class AsyncResponse:
    """A streaming response: ``await r.read(n)``, ``async for chunk in r.iter_bytes()``."""

    def __init__(self, r: Response) -> None:
        self._r = r
        self.status = r.status
        self.headers = r.headers

    async def read(self, n: int = -1) -> bytes:
        return await asyncio.to_thread(self._r.read, n)

    def iter_bytes(self, chunk: int = _c.CHUNK) -> AsyncStream:
        return AsyncStream(self._r.iter_bytes(chunk), on_close=self._r.close)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._r.close)

    async def __aenter__(self) -> "AsyncResponse":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncProcess(_AsyncProxy):
    """A process; ``async for piece in proc`` yields ProcessOutput, ``await proc.wait()``."""

    _target: Process

    @property
    def pid(self) -> int:
        return self._target.pid

    @property
    def result(self) -> _c.ExecResult | None:
        return self._target.result

    def __aiter__(self) -> AsyncStream:
        return AsyncStream(iter(self._target), on_close=self._target.close)

    def events(self) -> AsyncStream:
        return AsyncStream(self._target.events(), on_close=self._target.close)

    async def __aenter__(self) -> "AsyncProcess":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self._target.close)


class AsyncPty(_AsyncProxy):
    """A terminal; ``async for data in pty`` yields output bytes."""

    _target: Pty

    @property
    def exit_code(self) -> int | None:
        return self._target.exit_code

    def __aiter__(self) -> AsyncStream:
        return AsyncStream(iter(self._target), on_close=self._target.close)

    async def __aenter__(self) -> "AsyncPty":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self._target.close)


class AsyncSandbox(_AsyncProxy):
    """A sandbox; ``async with`` kills it on exit."""

    _target: Sandbox

    @property
    def id(self) -> str:
        return self._target.id

    @property
    def info(self) -> Any:
        return self._target.info

    @property
    def state(self) -> str:
        return self._target.state

    @property
    def files(self) -> Any:
        return _AsyncProxy(self._target.files)

    def logs(self, **kw: Any) -> AsyncStream:
        return AsyncStream(self._target.logs(**kw))

    def __repr__(self) -> str:
        return f"AsyncSandbox({self.id!r})"

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self._target.__exit__, None, None, None)


class AsyncWarden(_AsyncProxy):
    """The asyncio client; the constructor takes :class:`warden.Warden`'s arguments."""

    _target: Warden

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(Warden(*args, **kw))

    @property
    def sandboxes(self) -> Any:
        return _AsyncProxy(self._target.sandboxes)

    @property
    def base_url(self) -> str:
        return self._target.base_url

    async def __aenter__(self) -> "AsyncWarden":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._target.close()
