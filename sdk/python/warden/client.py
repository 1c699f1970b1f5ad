"""The synchronous Warden client."""

from __future__ import annotations

import base64
import json as _json
import os
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO, Callable, Iterable, Iterator, List, Literal, Mapping, Sequence, cast

from . import _types as t
from . import errors
from ._http import CHUNK, Body, Response, RetryPolicy, Transport, TransportBase, quote
from ._ws import OP_BINARY, OP_CLOSE, OP_TEXT, WebSocket

__all__ = [
    "Warden", "Sandbox", "Process", "ProcessOutput", "ExecResult", "Files", "WatchHandle",
    "Pty", "Execution", "CodeResult", "CodeError",
]

#: The states of an agent run that has ended.
RUN_ENDED = frozenset({"succeeded", "failed", "timed_out", "cancelled"})

#: Operation ids of the spec that this client implements (see tests/test_coverage.py).
COVERED: set[str] = set()


def _op(*ids: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    COVERED.update(ids)

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__warden_ops__ = ids  # type: ignore[attr-defined]
        return fn
    return deco


def _clean(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


# ---------------------------------------------------------------- processes


@dataclass
class ProcessOutput:
    """A piece of output: ``stream`` is ``stdout``, ``stderr`` or ``pty``."""

    stream: str
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass
class ExecResult:
    """How a process ended, and the output captured (when capture was on)."""

    exit_code: int
    signal: int = 0
    status: str = ""
    error: str = ""
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.signal == 0 and not self.error


OutputCallback = Callable[[str], Any]


def process_event(ev: Mapping[str, Any]) -> tuple[int, ExecResult | None, errors.APIError | None]:
    """What an event of a process stream tells: the pid (start), how it ended (end), or the
    error it carries; shared by both clients."""
    typ = ev.get("type")
    if typ == "start" and ev.get("pid"):
        return int(ev["pid"]), None, None
    if typ == "end":
        return 0, ExecResult(exit_code=int(ev.get("exit_code") or 0), signal=int(ev.get("signal") or 0),
                             status=str(ev.get("status") or ""), error=str(ev.get("error") or "")), None
    if typ == "error":
        return 0, None, errors.error_from_event(ev)
    return 0, None, None


def output_of(ev: Mapping[str, Any]) -> ProcessOutput | None:
    """The output piece an event of a process stream carries, if any."""
    if ev.get("type") in ("stdout", "stderr", "pty"):
        return ProcessOutput(str(ev["type"]), base64.b64decode(ev.get("data") or ""))
    return None


class Process:
    """A process in a sandbox, with its event stream attached.

    Iterate it for :class:`ProcessOutput` pieces, or call :meth:`wait`. The stream can be
    dropped with :meth:`disconnect` without stopping the process; another client (or this
    one) re-attaches with :meth:`Sandbox.attach`.
    """

    def __init__(self, sandbox: "Sandbox", resp: Response, pid: int = 0, tag: str = "") -> None:
        self.sandbox = sandbox
        self.pid = pid
        self.tag = tag
        self._resp = resp
        self._events = resp.iter_lines()
        self._pending: dict[str, Any] | None = None
        self.result: ExecResult | None = None
        self._closed = False

    def _start(self) -> None:
        ev = self._next_event()
        if ev is None:
            raise errors.StreamError("process stream ended before the start event")
        if ev.get("type") != "start":
            self._pending = ev

    def _next_event(self) -> dict[str, Any] | None:
        ev: dict[str, Any] | None
        if self._pending is not None:
            ev, self._pending = self._pending, None
            return ev
        if self._closed:
            return None
        ev = next(self._events, None)
        if ev is None:
            self.close()
            if self.result is None:
                raise errors.StreamError("process stream ended before the end event")
            return None
        pid, result, err = process_event(ev)
        if pid:
            self.pid = pid
        if result is not None:
            self.result = result
            self.close()
        if err is not None:
            self.close()
            raise err
        return ev

    def events(self) -> Iterator[t.ProcessEvent]:
        """Yields the raw events (``data`` still base64) until the end event."""
        while True:
            ev = self._next_event()
            if ev is None:
                return
            yield cast(t.ProcessEvent, ev)
            if ev.get("type") == "end":
                return

    def __iter__(self) -> Iterator[ProcessOutput]:
        for ev in self.events():
            piece = output_of(ev)
            if piece is not None:
                yield piece

    def wait(self, on_stdout: OutputCallback | None = None, on_stderr: OutputCallback | None = None,
             *, capture: bool = True) -> ExecResult:
        """Reads the stream to its end, calling the callbacks with text as it arrives."""
        out, err = bytearray(), bytearray()
        for piece in self:
            if piece.stream == "stderr":
                if capture:
                    err += piece.data
                if on_stderr:
                    on_stderr(piece.text)
            else:
                if capture:
                    out += piece.data
                if on_stdout:
                    on_stdout(piece.text)
        if self.result is None:
            raise errors.StreamError("process stream ended before the end event")
        self.result.stdout_bytes, self.result.stderr_bytes = bytes(out), bytes(err)
        return self.result

    def send_stdin(self, data: bytes | str) -> None:
        self.sandbox.send_stdin(self.pid, data)

    def close_stdin(self) -> None:
        self.sandbox.close_stdin(self.pid)

    def signal(self, sig: str = "SIGTERM") -> None:
        self.sandbox.signal(self.pid, sig)

    def kill(self) -> None:
        self.sandbox.signal(self.pid, "SIGKILL")

    def disconnect(self) -> None:
        """Closes this client's stream; the process keeps running."""
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._resp.close()

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------- code


@dataclass
class CodeResult:
    """One rich result of a cell: its MIME bundle. Binary formats are base64 in the event;
    :meth:`png_bytes` and friends decode them."""

    raw: dict[str, Any]

    @property
    def is_main_result(self) -> bool:
        return bool(self.raw.get("is_main_result"))

    @property
    def text(self) -> str | None:
        return self.raw.get("text")

    def formats(self) -> List[str]:
        return [k for k in self.raw if k not in ("type", "is_main_result", "extra") and self.raw[k] is not None]

    def _bin(self, k: str) -> bytes | None:
        v = self.raw.get(k)
        return base64.b64decode(v) if v else None

    def png_bytes(self) -> bytes | None:
        return self._bin("png")

    def jpeg_bytes(self) -> bytes | None:
        return self._bin("jpeg")

    def pdf_bytes(self) -> bytes | None:
        return self._bin("pdf")

    def __getattr__(self, k: str) -> Any:
        if k in ("html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript", "chart", "data"):
            return self.raw.get(k)
        raise AttributeError(k)


@dataclass
class CodeError:
    name: str
    value: str
    traceback: str


@dataclass
class Execution:
    """The outcome of a cell."""

    results: list[CodeResult] = field(default_factory=list)
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    error: CodeError | None = None
    execution_count: int = 0

    @property
    def text(self) -> str | None:
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None


class CodeRun:
    """Folds the events of a code run into an :class:`Execution`, calling the callbacks;
    shared by both clients (the asyncio one awaits what a callback returns)."""

    def __init__(self, on_stdout: Callable[[str], Any] | None = None, on_stderr: Callable[[str], Any] | None = None,
                 on_result: Callable[[CodeResult], Any] | None = None,
                 on_error: Callable[[CodeError], Any] | None = None) -> None:
        self.execution = Execution()
        self._cb = (on_stdout, on_stderr, on_result, on_error)
        #: What the callbacks returned for the last event (awaitables for the asyncio client).
        self.returned: list[Any] = []

    def _call(self, cb: Callable[[Any], Any] | None, arg: Any) -> None:
        if cb is not None:
            self.returned.append(cb(arg))

    def feed(self, ev: Mapping[str, Any]) -> bool:
        """Takes one event; True once the run has ended. Raises a stream error event."""
        ex = self.execution
        on_stdout, on_stderr, on_result, on_error = self._cb
        self.returned = []
        typ = ev.get("type")
        if typ == "stdout":
            ex.stdout.append(ev.get("text", ""))
            self._call(on_stdout, ev.get("text", ""))
        elif typ == "stderr":
            ex.stderr.append(ev.get("text", ""))
            self._call(on_stderr, ev.get("text", ""))
        elif typ == "result":
            res = CodeResult(dict(ev))
            ex.results.append(res)
            self._call(on_result, res)
        elif typ == "error":
            if "name" not in ev and "code" in ev:
                raise errors.error_from_event(ev)
            ex.error = CodeError(str(ev.get("name", "")), str(ev.get("value", "")), str(ev.get("traceback", "")))
            self._call(on_error, ex.error)
        elif typ == "number_of_executions":
            ex.execution_count = int(ev.get("execution_count") or 0)
        elif typ == "end_of_execution":
            return True
        elif typ == "unexpected_end_of_execution":
            raise errors.StreamError("code run ended before end_of_execution")
        return False


# ---------------------------------------------------------------- files


class WatchHandle:
    """A file-system watch; iterate it for WatchEvents of type ``event``."""

    def __init__(self, resp: Response) -> None:
        self._resp = resp
        self._events = resp.iter_lines()
        first = next(self._events, None)
        self._pending = first if first and first.get("type") != "start" else None

    def __iter__(self) -> Iterator[t.WatchEvent]:
        if self._pending:
            ev, self._pending = self._pending, None
            if ev.get("type") == "error":
                raise errors.error_from_event(ev)
            yield cast(t.WatchEvent, ev)
        for ev in self._events:
            if ev.get("type") == "error":
                self.close()
                raise errors.error_from_event(ev)
            yield cast(t.WatchEvent, ev)

    def close(self) -> None:
        self._resp.close()

    def __enter__(self) -> "WatchHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Files:
    """Files of one sandbox. Paths are absolute or relative to the sandbox's workdir."""

    def __init__(self, sb: "Sandbox") -> None:
        self._sb = sb
        self._tr: Transport = sb._tr

    def _p(self, suffix: str) -> str:
        return f"/v1/sandboxes/{quote(self._sb.id)}{suffix}"

    @_op("readFile")
    def open(self, path: str, *, user: str | None = None, offset: int = 0, length: int | None = None) -> Response:
        """Opens a file for streaming reads: ``with sb.files.open(p) as r: r.read(n)``."""
        h = {}
        if offset or length:
            end = "" if length is None else str(offset + length - 1)
            h["Range"] = f"bytes={offset}-{end}"
        return self._tr.request("GET", self._p("/files"), query={"path": path, "user": user}, headers=h,
                                accept="application/octet-stream", idempotent=True, stream=True)

    def read_bytes(self, path: str, *, user: str | None = None) -> bytes:
        with self.open(path, user=user) as r:
            return r.read()

    def read_text(self, path: str, *, user: str | None = None, encoding: str = "utf-8") -> str:
        return self.read_bytes(path, user=user).decode(encoding)

    def read(self, path: str, *, user: str | None = None) -> str:
        return self.read_text(path, user=user)

    def iter_bytes(self, path: str, *, user: str | None = None, chunk: int = CHUNK) -> Iterator[bytes]:
        """Yields a file's content in chunks, never holding more than one."""
        with self.open(path, user=user) as r:
            yield from r.iter_bytes(chunk)

    def download(self, path: str, dest: str | os.PathLike[str] | BinaryIO, *, user: str | None = None) -> int:
        """Streams a file to a local path or binary file object; returns the bytes copied."""
        n = 0
        with self.open(path, user=user) as r:
            if isinstance(dest, (str, os.PathLike)):
                with open(dest, "wb") as f:
                    for c in r.iter_bytes():
                        f.write(c)
                        n += len(c)
            else:
                for c in r.iter_bytes():
                    dest.write(c)
                    n += len(c)
        return n

    @_op("writeFile")
    def write(self, path: str, data: Body, *, mode: int | None = None, user: str | None = None) -> t.Entry:
        """Writes a file, creating parents. ``data`` is str, bytes, a binary file object or
        an iterable of bytes; file objects and iterables are streamed, not loaded."""
        q = {"path": path, "user": user, "mode": None if mode is None else format(mode, "04o")}
        return self._tr.call("PUT", self._p("/files"), query=q, body=data if data is not None else b"",
                             content_type="application/octet-stream", idempotent=not _is_iter(data),
                             stream=True)

    def upload(self, path: str, src: str | os.PathLike[str], *, mode: int | None = None,
               user: str | None = None) -> t.Entry:
        """Streams a local file into the sandbox."""
        with open(src, "rb") as f:
            return self.write(path, f, mode=mode, user=user)

    @_op("removeFile")
    def remove(self, path: str) -> None:
        self._tr.call("DELETE", self._p("/files"), query={"path": path}, idempotent=True)

    @_op("statFile")
    def stat(self, path: str) -> t.Entry:
        return self._tr.call("GET", self._p("/fs/stat"), query={"path": path}, idempotent=True)

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except errors.NotFoundError:
            return False

    @_op("listDir")
    def list(self, path: str, *, depth: int | None = None) -> List[t.Entry]:
        r = self._tr.call("GET", self._p("/fs/list"), query={"path": path, "depth": depth}, idempotent=True)
        return list(r.get("entries") or [])

    @_op("makeDir")
    def mkdir(self, path: str) -> t.Entry:
        return self._tr.call("POST", self._p("/fs/mkdir"), json={"path": path})

    @_op("moveFile")
    def move(self, source: str, destination: str) -> t.Entry:
        return self._tr.call("POST", self._p("/fs/move"), json={"source": source, "destination": destination})

    @_op("watchDir")
    def watch(self, path: str, *, recursive: bool = False) -> WatchHandle:
        """Watches a directory; returns once the watch is in place."""
        r = self._tr.request("GET", self._p("/fs/watch"), query={"path": path, "recursive": recursive},
                             accept="application/x-ndjson", idempotent=True, stream=True)
        return WatchHandle(r)

    @_op("downloadArchive")
    def download_archive(self, path: str) -> Response:
        """A tar stream of the directory at path; read it and close it."""
        return self._tr.request("GET", self._p("/archive"), query={"path": path}, accept="application/x-tar",
                                idempotent=True, stream=True)

    @_op("uploadArchive")
    def upload_archive(self, path: str, tar: Body) -> None:
        self._tr.call("PUT", self._p("/archive"), query={"path": path}, body=tar, content_type="application/x-tar",
                      idempotent=not _is_iter(tar), stream=True)

    @_op("presignFile")
    def presign(self, path: str, op: Literal["read", "write"], *, expires_seconds: int | None = None,
                user: str | None = None) -> t.PresignResponse:
        return self._tr.call("POST", self._p("/files/presign"), idempotent=True,
                             json=_clean({"path": path, "op": op, "expires_seconds": expires_seconds, "user": user}))

    def download_url(self, path: str, *, expires_seconds: int | None = None, user: str | None = None) -> str:
        """A URL that reads the file without an API key until it expires."""
        return self._url(self.presign(path, "read", expires_seconds=expires_seconds, user=user)["url"])

    def upload_url(self, path: str, *, expires_seconds: int | None = None, user: str | None = None) -> str:
        """A URL that accepts a PUT of the file's content without an API key."""
        return self._url(self.presign(path, "write", expires_seconds=expires_seconds, user=user)["url"])

    def _url(self, u: str) -> str:
        return u if "://" in u else self._tr.base_url + u


def _is_iter(body: Any) -> bool:
    return body is not None and not isinstance(body, (bytes, bytearray, memoryview, str)) and not hasattr(body, "seek")


# ---------------------------------------------------------------- pty


class Pty:
    """An interactive terminal. Read output with :meth:`read` or iteration; write with
    :meth:`write`; the process's exit code is ``exit_code`` once it has exited."""

    def __init__(self, ws: WebSocket) -> None:
        self._ws = ws
        self.exit_code: int | None = None
        self._done = False

    def write(self, data: bytes | str) -> None:
        self._ws.send(OP_BINARY, data.encode() if isinstance(data, str) else bytes(data))

    def resize(self, cols: int, rows: int) -> None:
        self._ws.send(OP_TEXT, _json.dumps({"type": "resize", "cols": cols, "rows": rows}).encode())

    def read(self) -> bytes | None:
        """Returns the next output bytes, or None once the terminal has closed."""
        while not self._done:
            op, data = self._ws.recv()
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

    def __iter__(self) -> Iterator[bytes]:
        while (b := self.read()) is not None:
            yield b

    def wait(self, on_data: Callable[[bytes], Any] | None = None) -> int | None:
        """Reads until the terminal closes; returns the exit code."""
        for b in self:
            if on_data:
                on_data(b)
        return self.exit_code

    def close(self) -> None:
        self._done = True
        self._ws.close()

    def __enter__(self) -> "Pty":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------- sandbox


class Sandbox:
    """A handle on one sandbox. ``with`` kills it on exit."""

    def __init__(self, client: "Warden", info: t.Sandbox) -> None:
        self.client = client
        self._tr: Transport = client._tr
        self.info = info
        self.id: str = info["id"]
        self.files = Files(self)

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, state={self.state!r})"

    @property
    def state(self) -> str:
        return str(self.info.get("state", ""))

    def _p(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{quote(self.id)}{suffix}"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.kill()
        except (errors.NotFoundError, errors.ConflictError):
            pass

    # lifecycle

    def refresh(self) -> t.Sandbox:
        self.info = self.client.sandboxes.info(self.id)
        return self.info

    @_op("killSandbox")
    def kill(self) -> None:
        self._tr.call("DELETE", self._p(), idempotent=True)

    @_op("setSandboxTimeout")
    def set_timeout(self, seconds: int) -> t.Sandbox:
        self.info = self._tr.call("POST", self._p("/timeout"), json={"timeout_seconds": seconds}, idempotent=True)
        return self.info

    @_op("pauseSandbox")
    def pause(self) -> t.Sandbox:
        self.info = self._tr.call("POST", self._p("/pause"), idempotent=True)
        return self.info

    @_op("resumeSandbox")
    def resume(self) -> t.Sandbox:
        self.info = self._tr.call("POST", self._p("/resume"), idempotent=True)
        return self.info

    @_op("forkSandbox")
    def fork(self, count: int | None = None, *, name: str | None = None, timeout_seconds: int | None = None,
             metadata: Mapping[str, str] | None = None) -> List["Sandbox"]:
        """Copies the running sandbox (memory and disk) into ``count`` new ones."""
        body = _clean({"count": count, "name": name, "timeout_seconds": timeout_seconds, "metadata": metadata})
        r = self._tr.call("POST", self._p("/fork"), json=body)
        return [Sandbox(self.client, s) for s in r.get("sandboxes") or []]

    @_op("createSnapshot")
    def snapshot(self, name: str | None = None, memory: bool | None = None) -> t.Snapshot:
        """Saves the sandbox's files (it keeps running) as a snapshot, named ``name`` or by its id.

        ``memory=True`` also keeps its memory (gvisor): sandboxes from it run on from that moment."""
        return self._tr.call("POST", self._p("/snapshots"), json=_clean({"name": name, "memory": memory}))

    @_op("getNetwork")
    def network(self) -> t.NetworkStatus:
        return self._tr.call("GET", self._p("/network"), idempotent=True)

    @_op("setNetwork")
    def set_network(self, mode: Literal["none", "allowlist", "open"],
                    allow: Sequence[str | t.NetworkPolicyAllowItem] | None = None) -> t.NetworkStatus:
        """Replaces the network policy; an ``allow`` entry is a rule, or a host name."""
        rules = None if allow is None else [{"host": a} if isinstance(a, str) else dict(cast(Mapping[str, Any], a))
                                            for a in allow]
        return self._tr.call("PUT", self._p("/network"), json=_clean({"mode": mode, "allow": rules}), idempotent=True)

    @_op("getSandboxUsage")
    def usage(self) -> t.Usage:
        return self._tr.call("GET", self._p("/usage"), idempotent=True)

    @_op("getSandboxLogs")
    def logs(self, *, pid: int | None = None, follow: bool = False) -> Iterator[t.LogEvent]:
        """Yields the output the agent kept of the sandbox's processes (``data`` is base64)."""
        with self._tr.request("GET", self._p("/logs"), query={"pid": pid, "follow": follow},
                              accept="application/x-ndjson", idempotent=True, stream=True) as r:
            for ev in r.iter_lines():
                if ev.get("stream") == "error":
                    raise errors.error_from_event(ev)
                yield cast(t.LogEvent, ev)

    # processes

    @_op("execProcess")
    def start(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
              user: str | None = None, stdin: bool = False, tag: str | None = None,
              timeout_seconds: int | None = None) -> Process:
        """Starts a process and returns it with its stream attached. A str is a shell line
        (``bash -lc``), a sequence an argv."""
        body: dict[str, Any] = {"cmd": list(cmd)} if not isinstance(cmd, str) else {"command": cmd}
        body.update(_clean({"env": env, "cwd": cwd, "user": user, "tag": tag, "timeout_seconds": timeout_seconds}))
        if stdin:
            body["stdin"] = True
        r = self._tr.request("POST", self._p("/exec"), json=body, accept="application/x-ndjson", stream=True)
        p = Process(self, r, tag=tag or "")
        try:
            p._start()
        except BaseException:
            p.close()
            raise
        return p

    def exec(self, cmd: str | Sequence[str], *, on_stdout: OutputCallback | None = None,
             on_stderr: OutputCallback | None = None, input: bytes | str | None = None,
             env: Mapping[str, str] | None = None, cwd: str | None = None, user: str | None = None,
             timeout_seconds: int | None = None, capture: bool = True) -> ExecResult:
        """Runs a command to its end, streaming output to the callbacks, and returns how it
        ended with the output captured. ``input`` is written to its stdin, then closed."""
        with self.start(cmd, env=env, cwd=cwd, user=user, stdin=input is not None,
                        timeout_seconds=timeout_seconds) as p:
            failed: list[BaseException] = []
            th = None
            if input is not None:
                data = input.encode() if isinstance(input, str) else input

                def feed() -> None:
                    try:
                        for i in range(0, len(data), CHUNK):
                            p.send_stdin(data[i:i + CHUNK])
                        p.close_stdin()
                    except (errors.ConflictError, errors.NotFoundError):
                        pass  # the process exited before reading all of it
                    except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                        failed.append(e)
                th = threading.Thread(target=feed, daemon=True)
                th.start()
            res = p.wait(on_stdout, on_stderr, capture=capture)
            if th is not None:
                th.join()
            if failed:
                raise failed[0]
            return res

    @_op("streamProcess")
    def attach(self, pid: int, *, replay: bool = True) -> Process:
        """Attaches to a process started earlier (by any client)."""
        r = self._tr.request("GET", self._p(f"/processes/{int(pid)}/stream"), query={"replay": replay},
                             accept="application/x-ndjson", idempotent=True, stream=True)
        p = Process(self, r, pid=pid)
        return p

    @_op("listProcesses")
    def processes(self) -> List[t.ProcessInfo]:
        return list(self._tr.call("GET", self._p("/processes"), idempotent=True).get("processes") or [])

    @_op("sendProcessStdin")
    def send_stdin(self, pid: int, data: bytes | str) -> None:
        self._tr.call("POST", self._p(f"/processes/{int(pid)}/stdin"), body=data if data else b"",
                      content_type="application/octet-stream")

    @_op("closeProcessStdin")
    def close_stdin(self, pid: int) -> None:
        self._tr.call("POST", self._p(f"/processes/{int(pid)}/close-stdin"), idempotent=True)

    @_op("signalProcess")
    def signal(self, pid: int, sig: str = "SIGTERM") -> None:
        self._tr.call("POST", self._p(f"/processes/{int(pid)}/signal"), json={"signal": sig})

    @_op("openPty")
    def pty(self, cmd: str | None = None, args: Sequence[str] = (), *, cols: int = 80, rows: int = 24,
            user: str | None = None) -> Pty:
        """Opens an interactive terminal running cmd (default /bin/bash)."""
        q = {"cols": cols, "rows": rows, "cmd": cmd, "arg": list(args), "user": user}
        ws = WebSocket.connect(self._tr.endpoint, self._tr.url(self._p("/pty"), q), self._tr.headers(),
                               self._tr.timeout, self._tr.ssl_context)
        return Pty(ws)

    # code

    @_op("runCode")
    def run_code(self, code: str, *, language: str | None = None, context_id: str | None = None,
                 env: Mapping[str, str] | None = None, timeout_seconds: int | None = None, user: str | None = None,
                 on_stdout: OutputCallback | None = None, on_stderr: OutputCallback | None = None,
                 on_result: Callable[[CodeResult], Any] | None = None,
                 on_error: Callable[[CodeError], Any] | None = None) -> Execution:
        """Runs a cell in a stateful interpreter and returns its results."""
        body = _clean({"code": code, "language": language, "context_id": context_id, "env": env,
                       "timeout_seconds": timeout_seconds, "user": user})
        run = CodeRun(on_stdout, on_stderr, on_result, on_error)
        with self._tr.request("POST", self._p("/code/run"), json=body, accept="application/x-ndjson",
                              stream=True) as r:
            for ev in r.iter_lines():
                if run.feed(ev):
                    return run.execution
        raise errors.StreamError("code run ended before end_of_execution")

    @_op("createCodeContext")
    def create_code_context(self, language: str | None = None, *, cwd: str | None = None,
                            user: str | None = None) -> t.CodeContext:
        return self._tr.call("POST", self._p("/code/contexts"), json=_clean({"language": language, "cwd": cwd, "user": user}))

    @_op("listCodeContexts")
    def code_contexts(self) -> List[t.CodeContext]:
        return list(self._tr.call("GET", self._p("/code/contexts"), idempotent=True).get("contexts") or [])

    @_op("restartCodeContext")
    def restart_code_context(self, context_id: str) -> None:
        self._tr.call("POST", self._p(f"/code/contexts/{quote(context_id)}/restart"))

    @_op("interruptCodeContext")
    def interrupt_code_context(self, context_id: str) -> None:
        self._tr.call("POST", self._p(f"/code/contexts/{quote(context_id)}/interrupt"))

    @_op("deleteCodeContext")
    def delete_code_context(self, context_id: str) -> None:
        self._tr.call("DELETE", self._p(f"/code/contexts/{quote(context_id)}"))

    # git

    def _git(self, op: str, body: Mapping[str, Any]) -> t.GitResult:
        # The response comes when git ends: wait as long as the command may run.
        timeout = self._tr.timeout
        if timeout is not None:
            timeout = max(timeout, float(body.get("timeout_seconds") or 600) + 30)
        return self._tr.call("POST", self._p(f"/git/{op}"), json=_clean(body), timeout=timeout)

    @_op("gitClone")
    def git_clone(self, url: str, path: str | None = None, *, branch: str | None = None, depth: int | None = None,
                  secret: str | None = None, timeout_seconds: int | None = None) -> t.GitResult:
        """Clones an https repository into the sandbox as its default user (``path``: relative
        to the user's home or absolute; default the repository's name). ``secret``, the id of a
        secret you own holding a token, is brokered for the URL's host for this command only:
        the token never enters the sandbox. A git failure is a non-zero ``exit_code`` with the
        tails of git's output, not an exception."""
        return self._git("clone", {"url": url, "path": path, "branch": branch, "depth": depth, "secret": secret,
                                   "timeout_seconds": timeout_seconds})

    @_op("gitPull")
    def git_pull(self, path: str, *, remote: str | None = None, branch: str | None = None, secret: str | None = None,
                 timeout_seconds: int | None = None) -> t.GitResult:
        """Pulls (fast-forward only) the repository at ``path``; ``secret`` as for :meth:`git_clone`."""
        return self._git("pull", {"path": path, "remote": remote, "branch": branch, "secret": secret,
                                  "timeout_seconds": timeout_seconds})

    @_op("gitCommit")
    def git_commit(self, path: str, message: str, *, author_name: str | None = None, author_email: str | None = None,
                   all: bool | None = None, timeout_seconds: int | None = None) -> t.GitResult:
        """Commits in the repository at ``path``, every change staged first unless ``all`` is
        False; an author given is also the committer. The result's ``head`` is the new commit."""
        return self._git("commit", {"path": path, "message": message, "author_name": author_name,
                                    "author_email": author_email, "all": all, "timeout_seconds": timeout_seconds})

    @_op("gitPush")
    def git_push(self, path: str, *, remote: str | None = None, branch: str | None = None, secret: str | None = None,
                 timeout_seconds: int | None = None) -> t.GitResult:
        """Pushes the repository at ``path`` (``remote`` default origin); ``secret`` as for
        :meth:`git_clone`."""
        return self._git("push", {"path": path, "remote": remote, "branch": branch, "secret": secret,
                                  "timeout_seconds": timeout_seconds})

    @_op("gitStatus")
    def git_status(self, path: str) -> t.GitResult:
        """The branch, HEAD, upstream, ahead/behind counts and changed paths of the repository
        at ``path``."""
        return self._tr.call("GET", self._p("/git/status"), query={"path": path}, idempotent=True)

    # ports

    @_op("publishPort")
    def publish_port(self, port: int, *, public: bool = True) -> t.Port:
        """Makes the port reachable without credentials (``public=False``: private again)."""
        return self._tr.call("POST", self._p(f"/ports/{int(port)}"), json={"public": public}, idempotent=True)

    @_op("unpublishPort")
    def unpublish_port(self, port: int) -> None:
        self._tr.call("DELETE", self._p(f"/ports/{int(port)}"), idempotent=True)

    @_op("createPreviewURL")
    def preview_url(self, port: int, *, expires_seconds: int | None = None) -> t.PreviewURL:
        return self._tr.call("POST", self._p(f"/ports/{int(port)}/url"), json=_clean({"expires_seconds": expires_seconds}))

    @_op("proxyPort")
    def proxy_url(self, port: int, path: str = "") -> str:
        """The daemon's URL for path on the sandbox's port (send the API key, or use
        :meth:`preview_url` for a signed one)."""
        return f"{self._tr.base_url}/v1/sandboxes/{quote(self.id)}/ports/{int(port)}/proxy/{path.lstrip('/')}"


# ---------------------------------------------------------------- namespaces


class _NS:
    def __init__(self, client: "Warden") -> None:
        self._c = client
        self._tr: Transport = client._tr


class Sandboxes(_NS):
    @_op("createSandbox")
    def create(self, template: str | None = None, *, name: str | None = None, isolation: str | None = None,
               cpu_millis: int | None = None, memory_mb: int | None = None, disk_mb: int | None = None,
               env: Mapping[str, str] | None = None, metadata: Mapping[str, str] | None = None,
               timeout_seconds: int | None = None, user: str | None = None, workdir: str | None = None,
               auto_pause: bool | None = None, auto_resume: bool | None = None, sudo: bool | None = None,
               network: t.NetworkPolicy | None = None, snapshot: str | None = None) -> Sandbox:
        """Creates a sandbox and returns it running. ``with`` kills it on exit."""
        body = _clean({"template": template, "name": name, "isolation": isolation, "cpu_millis": cpu_millis,
                       "memory_mb": memory_mb, "disk_mb": disk_mb, "env": env, "metadata": metadata,
                       "timeout_seconds": timeout_seconds, "user": user, "workdir": workdir,
                       "auto_pause": auto_pause, "auto_resume": auto_resume, "sudo": sudo, "network": network,
                       "snapshot": snapshot})
        return Sandbox(self._c, self._tr.call("POST", "/v1/sandboxes", json=body))

    @_op("getSandbox")
    def info(self, ref: str) -> t.Sandbox:
        return self._tr.call("GET", f"/v1/sandboxes/{quote(ref)}", idempotent=True)

    def get(self, ref: str) -> Sandbox:
        """A handle on an existing sandbox, by ID or name."""
        return Sandbox(self._c, self.info(ref))

    connect = get

    @_op("listSandboxes")
    def list_page(self, *, state: str | Sequence[str] | None = None, metadata: Mapping[str, str] | None = None,
                  limit: int | None = None, page_token: str | None = None) -> t.SandboxList:
        q: dict[str, Any] = {"limit": limit, "page_token": page_token}
        if state:
            q["state"] = state if isinstance(state, str) else ",".join(state)
        if metadata:
            q["metadata"] = ",".join(f"{k}:{v}" for k, v in sorted(metadata.items()))
        return self._tr.call("GET", "/v1/sandboxes", query=q, idempotent=True)

    def list(self, *, state: str | Sequence[str] | None = None,
             metadata: Mapping[str, str] | None = None) -> Iterator[t.Sandbox]:
        """Yields every visible sandbox, following pages."""
        token = None
        while True:
            page = self.list_page(state=state, metadata=metadata, page_token=token)
            yield from page.get("sandboxes") or []
            nxt = page.get("next_page_token") or None
            if not nxt or nxt == token:
                return
            token = nxt

    def kill(self, ref: str) -> None:
        Sandbox(self._c, cast(t.Sandbox, {"id": ref})).kill()


class Templates(_NS):
    @_op("listTemplates")
    def list(self) -> List[t.Template]:
        return list(self._tr.call("GET", "/v1/templates", idempotent=True).get("templates") or [])

    @_op("getTemplate")
    def get(self, name: str) -> t.Template:
        return self._tr.call("GET", f"/v1/templates/{quote(name)}", idempotent=True)

    @_op("deleteTemplate")
    def delete(self, name: str) -> None:
        self._tr.call("DELETE", f"/v1/templates/{quote(name)}", idempotent=True)

    @_op("templateStoreUsage")
    def usage(self) -> t.TemplateUsage:
        return self._tr.call("GET", "/v1/template-store/usage", idempotent=True)

    @_op("templateStoreGC")
    def gc(self) -> t.GCReport:
        return self._tr.call("POST", "/v1/template-store/gc", idempotent=True)

    def _events(self, r: Response, on_event: Callable[[t.TemplateEvent], Any] | None) -> t.TemplateEvent:
        result = None
        with r:
            for ev in r.iter_lines():
                if on_event:
                    on_event(cast(t.TemplateEvent, ev))
                if ev.get("type") == "error":
                    raise errors.error_from_event(ev)
                if ev.get("type") == "result":
                    result = ev
        if result is None:
            raise errors.StreamError("template stream ended before its result")
        return cast(t.TemplateEvent, result)

    @_op("buildTemplate")
    def build(self, name: str, context: Body | str | os.PathLike[str], *, dockerfile: str | None = None,
              build_args: Mapping[str, str] | None = None, no_cache: bool = False, network: str | None = None,
              allow: Sequence[str] | None = None, cpu_millis: int | None = None, memory_mb: int | None = None,
              disk_mb: int | None = None, on_event: Callable[[t.TemplateEvent], Any] | None = None,
              on_log: Callable[[str], Any] | None = None) -> dict[str, Any]:
        """Builds a template from a build context: a directory path (tarred on the fly), or a
        tar as bytes or a binary file object. Streams events to ``on_event`` and RUN output
        lines to ``on_log``; returns the build result."""
        body: Any = context
        if isinstance(context, (str, os.PathLike)) and os.path.isdir(context):
            body = _tar_dir(os.fspath(context))
        q = {"name": name, "dockerfile": dockerfile, "no_cache": no_cache, "network": network,
             "allow": ",".join(allow) if allow else None, "cpu_millis": cpu_millis, "memory_mb": memory_mb,
             "disk_mb": disk_mb, "build_arg": [f"{k}={v}" for k, v in (build_args or {}).items()]}

        def each(ev: t.TemplateEvent) -> None:
            if on_event:
                on_event(ev)
            if on_log and ev.get("type") == "log":
                on_log(str(ev.get("text", "")))
        r = self._tr.request("POST", "/v1/templates/build", query=q, body=body, content_type="application/x-tar",
                             accept="application/x-ndjson", stream=True)
        res = self._events(r, each)
        return cast(dict[str, Any], res.get("build") or res)

    @_op("importTemplate")
    def import_image(self, name: str, image: str, *, username: str | None = None, password: str | None = None,
                     token: str | None = None, platform: str | None = None, start: bool | None = None,
                     on_event: Callable[[t.TemplateEvent], Any] | None = None) -> t.Template:
        """Imports an OCI or Docker image from a registry."""
        body = _clean({"name": name, "image": image, "username": username, "password": password, "token": token,
                       "platform": platform, "start": start})
        r = self._tr.request("POST", "/v1/templates/import", json=body, accept="application/x-ndjson", stream=True)
        return cast(t.Template, self._events(r, on_event).get("template"))

    def import_archive(self, name: str, archive: Body, *, format: str | None = None, tag: str | None = None,
                       platform: str | None = None, start: bool = False,
                       on_event: Callable[[t.TemplateEvent], Any] | None = None) -> t.Template:
        """Imports an image from a docker-save or OCI-layout tar (streamed)."""
        q = {"name": name, "format": format, "tag": tag, "platform": platform, "start": start}
        r = self._tr.request("POST", "/v1/templates/import", query=q, body=archive, content_type="application/x-tar",
                             accept="application/x-ndjson", stream=True)
        return cast(t.Template, self._events(r, on_event).get("template"))


def _tar_dir(path: str) -> Iterator[bytes]:
    """Streams a tar of directory path, without building it in memory or on disk."""
    import tarfile

    class _Pipe:
        def __init__(self) -> None:
            self.chunks: list[bytes] = []

        def write(self, b: bytes) -> int:
            self.chunks.append(bytes(b))
            return len(b)

        def tell(self) -> int:
            return 0

    pipe = _Pipe()
    tf = tarfile.open(fileobj=cast(IO[bytes], pipe), mode="w|")
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            full = os.path.join(root, name)
            tf.add(full, arcname=os.path.relpath(full, path), recursive=False)
            while pipe.chunks:
                yield pipe.chunks.pop(0)
    tf.close()
    while pipe.chunks:
        yield pipe.chunks.pop(0)


class Secrets(_NS):
    @_op("putSecret")
    def put(self, name: str, value: str) -> t.Secret:
        """Stores a secret (a new version when the name exists)."""
        return self._tr.call("POST", "/v1/secrets", json={"name": name, "value": value})

    @_op("listSecrets")
    def list(self) -> List[t.Secret]:
        return list(self._tr.call("GET", "/v1/secrets", idempotent=True).get("secrets") or [])

    @_op("revokeSecret")
    def revoke(self, id: str) -> None:
        self._tr.call("POST", f"/v1/secrets/{quote(id)}/revoke", idempotent=True)

    @_op("deleteSecret")
    def delete(self, id: str) -> None:
        self._tr.call("DELETE", f"/v1/secrets/{quote(id)}", idempotent=True)

    @_op("createGrant")
    def grant(self, secret_id: str, *, hosts: Sequence[str] | None = None, sandbox: str | None = None,
              principal: str | None = None, middleware: str | None = None, header: str | None = None,
              path_prefix: str | None = None, env_name: str | None = None) -> t.Grant:
        """Lets a sandbox (or a principal's sandboxes) use the secret on the given hosts, or an
        installed middleware read it (``middleware``; ``hosts`` then optional)."""
        body = _clean({"hosts": None if hosts is None else list(hosts), "sandbox": sandbox, "principal": principal,
                       "middleware": middleware, "header": header, "path_prefix": path_prefix, "env_name": env_name})
        return self._tr.call("POST", f"/v1/secrets/{quote(secret_id)}/grants", json=body)

    @_op("listGrants")
    def grants(self, secret_id: str) -> List[t.Grant]:
        return list(self._tr.call("GET", f"/v1/secrets/{quote(secret_id)}/grants", idempotent=True).get("grants") or [])

    @_op("revokeGrant")
    def revoke_grant(self, grant_id: str) -> None:
        self._tr.call("DELETE", f"/v1/grants/{quote(grant_id)}", idempotent=True)


class Keys(_NS):
    @_op("createKey")
    def create(self, scopes: Sequence[str], *, principal_id: str | None = None, name: str | None = None) -> t.CreateKeyResponse:
        """Creates an API key; the secret ``key`` is returned only here."""
        return self._tr.call("POST", "/v1/keys", json=_clean({"scopes": list(scopes), "principal_id": principal_id, "name": name}))

    @_op("listKeys")
    def list(self) -> List[t.APIKey]:
        return list(self._tr.call("GET", "/v1/keys", idempotent=True).get("keys") or [])

    @_op("revokeKey")
    def revoke(self, id: str) -> None:
        self._tr.call("DELETE", f"/v1/keys/{quote(id)}", idempotent=True)


class Principals(_NS):
    @_op("createPrincipal")
    def create(self, name: str, kind: Literal["user", "agent"] = "agent") -> t.Principal:
        return self._tr.call("POST", "/v1/principals", json={"kind": kind, "name": name})

    @_op("listPrincipals")
    def list(self) -> List[t.Principal]:
        return list(self._tr.call("GET", "/v1/principals", idempotent=True).get("principals") or [])


class Audit(_NS):
    @_op("listAudit")
    def page(self, *, after: int | None = None, limit: int | None = None, target: str | None = None,
             principal: str | None = None) -> t.AuditList:
        return self._tr.call("GET", "/v1/audit", query={"after": after, "limit": limit, "target": target,
                                                         "principal": principal}, idempotent=True)

    def events(self, *, after: int = 0, target: str | None = None, principal: str | None = None) -> Iterator[t.AuditEvent]:
        """Yields every audit event after seq ``after``, following pages."""
        while True:
            pg = self.page(after=after, target=target, principal=principal)
            evs = pg.get("events") or []
            yield from evs
            nxt = int(pg.get("next_after") or 0)
            if not evs or nxt <= after:
                return
            after = nxt

    @_op("verifyAudit")
    def verify(self) -> t.VerifyReport:
        return self._tr.call("GET", "/v1/audit/verify", idempotent=True)

    @_op("getAuditAnchor")
    def anchor(self) -> t.AuditAnchor:
        """Where the retained log starts after audit retention (size 0: nothing deleted)."""
        return self._tr.call("GET", "/v1/audit/anchor", idempotent=True)


class Policies(_NS):
    @_op("createPolicy")
    def create(self, policy: t.PolicyWrite | Mapping[str, Any]) -> t.Policy:
        return self._tr.call("POST", "/v1/policies", json=dict(policy))

    @_op("listPolicies")
    def list(self) -> List[t.Policy]:
        return list(self._tr.call("GET", "/v1/policies", idempotent=True).get("policies") or [])

    @_op("getPolicy")
    def get(self, id: str, *, version: int | None = None) -> t.Policy:
        return self._tr.call("GET", f"/v1/policies/{quote(id)}", query={"version": version}, idempotent=True)

    @_op("updatePolicy")
    def update(self, id: str, policy: t.PolicyWrite | Mapping[str, Any]) -> t.Policy:
        return self._tr.call("PUT", f"/v1/policies/{quote(id)}", json=dict(policy), idempotent=True)

    @_op("deletePolicy")
    def delete(self, id: str) -> None:
        self._tr.call("DELETE", f"/v1/policies/{quote(id)}", idempotent=True)

    @_op("testPolicy")
    def test(self, policy: t.PolicyWrite | Mapping[str, Any], *, limit: int | None = None, since: str | None = None,
             until: str | None = None) -> t.PolicyTestResult:
        """Dry-runs a policy against the audit log."""
        return self._tr.call("POST", "/v1/policies/test", idempotent=True,
                             json=_clean({"policy": dict(policy), "limit": limit, "since": since, "until": until}))

    @_op("testGuard")
    def test_guard(self, *, text: str | None = None, json: Any = None,
                   detectors: Sequence[str] | None = None) -> t.GuardTestResult:
        """Runs the guard's detectors over a text or a JSON value."""
        return self._tr.call("POST", "/v1/guard/test", idempotent=True,
                             json=_clean({"text": text, "json": json, "detectors": list(detectors) if detectors else None}))


    @_op("evalGuard")
    def eval_guard(self, jsonl: Body, *, split: str | None = None,
                   detectors: Sequence[str] | None = None) -> t.GuardEvalReport:
        """Measures the guard's detectors on labelled JSONL (``{"text", "label", "split"}``
        lines; bytes, a file object or an iterable, streamed)."""
        return self._tr.call("POST", "/v1/guard/eval", body=jsonl, content_type="application/x-ndjson",
                             query={"split": split, "detectors": ",".join(detectors) if detectors else None},
                             idempotent=not _is_iter(jsonl), stream=True)


class Approvals(_NS):
    @_op("listApprovals")
    def list(self, *, state: str | None = None, principal: str | None = None, limit: int | None = None) -> List[t.Approval]:
        r = self._tr.call("GET", "/v1/approvals", query={"state": state, "principal": principal, "limit": limit}, idempotent=True)
        return list(r.get("approvals") or [])

    @_op("getApproval")
    def get(self, id: str) -> t.Approval:
        return self._tr.call("GET", f"/v1/approvals/{quote(id)}", idempotent=True)

    @_op("approveApproval")
    def approve(self, id: str, reason: str | None = None) -> t.Approval:
        return self._tr.call("POST", f"/v1/approvals/{quote(id)}/approve", json=_clean({"reason": reason}))

    @_op("rejectApproval")
    def reject(self, id: str, reason: str | None = None) -> t.Approval:
        return self._tr.call("POST", f"/v1/approvals/{quote(id)}/reject", json=_clean({"reason": reason}))


class MCP(_NS):
    """The MCP gateway's administration (scope ``mcp:admin``)."""

    @_op("createMCPConnector")
    def create_connector(self, connector: t.MCPConnectorWrite | Mapping[str, Any]) -> t.MCPConnector:
        return self._tr.call("POST", "/v1/mcp/connectors", json=dict(connector))

    @_op("listMCPConnectors")
    def connectors(self) -> List[t.MCPConnector]:
        return list(self._tr.call("GET", "/v1/mcp/connectors", idempotent=True).get("connectors") or [])

    @_op("getMCPConnector")
    def get_connector(self, id: str) -> t.MCPConnector:
        return self._tr.call("GET", f"/v1/mcp/connectors/{quote(id)}", idempotent=True)

    @_op("updateMCPConnector")
    def update_connector(self, id: str, connector: t.MCPConnectorWrite | Mapping[str, Any]) -> t.MCPConnector:
        return self._tr.call("PUT", f"/v1/mcp/connectors/{quote(id)}", json=dict(connector), idempotent=True)

    @_op("deleteMCPConnector")
    def delete_connector(self, id: str) -> None:
        self._tr.call("DELETE", f"/v1/mcp/connectors/{quote(id)}", idempotent=True)

    @_op("putMCPCredential")
    def put_credential(self, connector_id: str, credential: t.MCPCredentialWrite | Mapping[str, Any]) -> t.MCPCredential:
        return self._tr.call("PUT", f"/v1/mcp/connectors/{quote(connector_id)}/credentials", json=dict(credential), idempotent=True)

    @_op("deleteMCPCredential")
    def delete_credential(self, connector_id: str, *, principal: str | None = None, shared: bool = False) -> None:
        self._tr.call("DELETE", f"/v1/mcp/connectors/{quote(connector_id)}/credentials",
                      query={"principal": principal, "shared": shared}, idempotent=True)

    @_op("createMCPServer")
    def create_server(self, server: t.MCPServerWrite | Mapping[str, Any]) -> t.MCPServer:
        return self._tr.call("POST", "/v1/mcp/servers", json=dict(server))

    @_op("listMCPServers")
    def servers(self) -> List[t.MCPServer]:
        return list(self._tr.call("GET", "/v1/mcp/servers", idempotent=True).get("servers") or [])

    @_op("getMCPServer")
    def get_server(self, id: str) -> t.MCPServer:
        return self._tr.call("GET", f"/v1/mcp/servers/{quote(id)}", idempotent=True)

    @_op("updateMCPServer")
    def update_server(self, id: str, server: t.MCPServerWrite | Mapping[str, Any]) -> t.MCPServer:
        return self._tr.call("PUT", f"/v1/mcp/servers/{quote(id)}", json=dict(server), idempotent=True)

    @_op("deleteMCPServer")
    def delete_server(self, id: str) -> None:
        self._tr.call("DELETE", f"/v1/mcp/servers/{quote(id)}", idempotent=True)

    @_op("listMCPGrants")
    def grants(self, server_id: str) -> List[t.MCPGrant]:
        return list(self._tr.call("GET", f"/v1/mcp/servers/{quote(server_id)}/grants", idempotent=True).get("grants") or [])

    @_op("grantMCPServer")
    def grant(self, server_id: str, principal: str) -> t.MCPGrant:
        return self._tr.call("PUT", f"/v1/mcp/servers/{quote(server_id)}/grants/{quote(principal)}", idempotent=True)

    @_op("revokeMCPServer")
    def revoke(self, server_id: str, principal: str) -> None:
        self._tr.call("DELETE", f"/v1/mcp/servers/{quote(server_id)}/grants/{quote(principal)}", idempotent=True)

    @_op("listMCPTools")
    def tools(self, *, state: str | None = None, connector: str | None = None, tool: str | None = None) -> List[t.MCPTool]:
        r = self._tr.call("GET", "/v1/mcp/tools", query={"state": state, "connector": connector, "tool": tool}, idempotent=True)
        return list(r.get("tools") or [])

    @_op("approveMCPTool")
    def approve_tool(self, connector: str, tool: str, hash: str) -> t.MCPTool:
        return self._tr.call("POST", f"/v1/mcp/tools/{quote(connector)}/{quote(tool)}/{quote(hash)}/approve")

    @_op("startMCPOAuth")
    def start_oauth(self, connector_id: str, request: t.MCPOAuthRequest | Mapping[str, Any] | None = None) -> t.MCPOAuthStart:
        """Starts a connector's OAuth authorization; returns where to send the user."""
        return self._tr.call("POST", f"/v1/mcp/connectors/{quote(connector_id)}/oauth", json=dict(request or {}))

    @_op("rejectMCPTool")
    def reject_tool(self, connector: str, tool: str, hash: str) -> t.MCPTool:
        return self._tr.call("POST", f"/v1/mcp/tools/{quote(connector)}/{quote(tool)}/{quote(hash)}/reject")


class Agents(_NS):
    """Hosted agents: definitions, runs, triggers and their memory."""

    @_op("createAgent")
    def create(self, spec: t.AgentSpec | Mapping[str, Any]) -> t.Agent:
        return self._tr.call("POST", "/v1/agents", json=dict(spec))

    @_op("listAgents")
    def list(self) -> List[t.Agent]:
        return list(self._tr.call("GET", "/v1/agents", idempotent=True).get("agents") or [])

    @_op("getAgent")
    def get(self, name: str) -> t.Agent:
        return self._tr.call("GET", f"/v1/agents/{quote(name)}", idempotent=True)

    @_op("updateAgent")
    def update(self, name: str, spec: t.AgentSpec | Mapping[str, Any]) -> t.Agent:
        return self._tr.call("PUT", f"/v1/agents/{quote(name)}", json=dict(spec), idempotent=True)

    @_op("deleteAgent")
    def delete(self, name: str) -> None:
        self._tr.call("DELETE", f"/v1/agents/{quote(name)}", idempotent=True)

    @_op("listAgentVersions")
    def versions(self, name: str) -> List[t.AgentVersion]:
        return list(self._tr.call("GET", f"/v1/agents/{quote(name)}/versions", idempotent=True).get("versions") or [])

    @_op("runAgent")
    def run(self, name: str, input: Any = None) -> t.AgentRun:
        """Starts a run; returns it queued."""
        return self._tr.call("POST", f"/v1/agents/{quote(name)}/runs", json=_clean({"input": input}))

    @_op("listAgentRuns")
    def runs(self, name: str, *, state: str | None = None, limit: int | None = None) -> List[t.AgentRun]:
        r = self._tr.call("GET", f"/v1/agents/{quote(name)}/runs", query={"state": state, "limit": limit}, idempotent=True)
        return list(r.get("runs") or [])

    @_op("agentWebhook")
    def webhook(self, name: str, payload: Any) -> t.AgentWebhookResponse:
        return self._tr.call("POST", f"/v1/agents/{quote(name)}/webhook", json=payload)

    @_op("getAgentRun")
    def get_run(self, run_id: str) -> t.AgentRun:
        return self._tr.call("GET", f"/v1/agent-runs/{quote(run_id)}", idempotent=True)

    def wait_run(self, run_id: str, *, timeout: float = 600.0, poll: float = 0.5) -> t.AgentRun:
        """Polls a run until it has ended (succeeded, failed, timed_out or cancelled) and
        returns it; raises TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.get_run(run_id)
            if r["state"] in RUN_ENDED:
                return r
            if time.monotonic() >= deadline:
                raise TimeoutError(f"agent run {run_id} still {r['state']} after {timeout} s")
            time.sleep(poll)

    @_op("getAgentRunLogs")
    def run_logs(self, run_id: str, *, follow: bool = False) -> Iterator[t.AgentLogLine]:
        """Yields a run's log lines; with follow, until the run ends."""
        with self._tr.request("GET", f"/v1/agent-runs/{quote(run_id)}/logs", query={"follow": follow},
                              accept="application/x-ndjson", idempotent=True, stream=True) as r:
            for ev in r.iter_lines():
                yield cast(t.AgentLogLine, ev)

    @_op("cancelAgentRun")
    def cancel_run(self, run_id: str) -> t.AgentRun:
        return self._tr.call("POST", f"/v1/agent-runs/{quote(run_id)}/cancel")

    @_op("replyAgentRun")
    def reply(self, run_id: str, text: str) -> t.ReplyAgentRunResponse:
        """Posts text in the Slack thread that started the run (while it runs)."""
        return self._tr.call("POST", f"/v1/agent-runs/{quote(run_id)}/reply", json={"text": text})

    @_op("agentSlackEvents")
    def forward_slack_event(self, name: str, body: bytes, headers: Mapping[str, str]) -> t.AgentSlackEventsResponse:
        """Relays a Slack Events API request, raw body and Slack's signature headers untouched,
        to the agent's Slack endpoint (no API key is sent: the daemon checks Slack's signature)."""
        tr = Transport(_transport_url(self._tr), api_key="", timeout=self._tr.timeout, retry=self._tr.retry,
                       ssl_context=self._tr.ssl_context)
        return tr.call("POST", f"/v1/agents/{quote(name)}/slack/events", body=bytes(body),
                       content_type="application/json", headers=dict(headers))

    @_op("listMemory")
    def memory(self, name: str, *, prefix: str | None = None, tag: str | None = None, q: str | None = None,
               limit: int | None = None) -> List[t.MemoryEntry]:
        r = self._tr.call("GET", f"/v1/agents/{quote(name)}/memory",
                          query={"prefix": prefix, "tag": tag, "q": q, "limit": limit}, idempotent=True)
        return list(r.get("entries") or [])

    @_op("getMemory")
    def memory_entry(self, name: str, key: str) -> t.GetMemoryResponse:
        return self._tr.call("GET", f"/v1/agents/{quote(name)}/memory/entry", query={"key": key}, idempotent=True)

    @_op("diffMemory")
    def memory_diff(self, name: str, key: str, *, from_version: int | None = None,
                    to_version: int | None = None) -> t.MemoryDiff:
        return self._tr.call("GET", f"/v1/agents/{quote(name)}/memory/diff",
                             query={"key": key, "from": from_version, "to": to_version}, idempotent=True)

    @_op("exportMemory")
    def memory_export(self, name: str) -> Iterator[t.MemoryEntry]:
        with self._tr.request("GET", f"/v1/agents/{quote(name)}/memory/export", accept="application/x-ndjson",
                              idempotent=True, stream=True) as r:
            for ev in r.iter_lines():
                yield cast(t.MemoryEntry, ev)

    @_op("redactMemory")
    def memory_redact(self, name: str, request: t.RedactMemoryRequest | Mapping[str, Any]) -> t.RedactMemoryResponse:
        return self._tr.call("POST", f"/v1/agents/{quote(name)}/memory/redact", json=dict(request))


class Volumes(_NS):
    """Persistent volumes, mountable into sandboxes."""

    @_op("createVolume")
    def create(self, spec: t.VolumeCreate | Mapping[str, Any]) -> t.Volume:
        return self._tr.call("POST", "/v1/volumes", json=dict(spec))

    @_op("listVolumes")
    def list(self) -> List[t.Volume]:
        return list(self._tr.call("GET", "/v1/volumes", idempotent=True).get("volumes") or [])

    @_op("getVolume")
    def get(self, name: str) -> t.Volume:
        return self._tr.call("GET", f"/v1/volumes/{quote(name)}", idempotent=True)

    @_op("deleteVolume")
    def delete(self, name: str) -> None:
        self._tr.call("DELETE", f"/v1/volumes/{quote(name)}", idempotent=True)

    @_op("resizeVolume")
    def resize(self, name: str, request: t.VolumeResize | Mapping[str, Any]) -> t.Volume:
        return self._tr.call("POST", f"/v1/volumes/{quote(name)}/resize", json=dict(request))

    @_op("readVolumeFile")
    def open(self, name: str, path: str) -> Response:
        """A file of the volume as a stream."""
        return self._tr.request("GET", f"/v1/volumes/{quote(name)}/files", query={"path": path},
                                accept="application/octet-stream", idempotent=True, stream=True)

    @_op("writeVolumeFile")
    def write(self, name: str, path: str, data: Body, *, mode: int | None = None) -> t.WriteVolumeFileResponse:
        q = {"path": path, "mode": None if mode is None else format(mode, "04o")}
        return self._tr.call("PUT", f"/v1/volumes/{quote(name)}/files", query=q, body=data if data is not None else b"",
                             content_type="application/octet-stream", idempotent=not _is_iter(data), stream=True)

    @_op("createVolumeSnapshot")
    def snapshot(self, name: str, snapshot: str | None = None) -> t.VolumeSnapshot:
        """Takes a point-in-time copy of volume ``name``, mounted by a sandbox or not (a mounted
        one is frozen for the copy), named ``snapshot`` (default ``snap-<time>``)."""
        return self._tr.call("POST", f"/v1/volumes/{quote(name)}/snapshots", json=_clean({"name": snapshot}))

    @_op("listVolumeSnapshots")
    def snapshots(self, name: str) -> List[t.VolumeSnapshot]:
        """The volume's snapshots, oldest first."""
        return list(self._tr.call("GET", f"/v1/volumes/{quote(name)}/snapshots", idempotent=True).get("snapshots") or [])

    @_op("deleteVolumeSnapshot")
    def delete_snapshot(self, name: str, snapshot: str) -> None:
        self._tr.call("DELETE", f"/v1/volumes/{quote(name)}/snapshots/{quote(snapshot)}", idempotent=True)

    @_op("restoreVolume")
    def restore(self, name: str, snapshot: str) -> t.Volume:
        """Replaces the volume's files with those of one of its snapshots, atomically; refused
        (ConflictError) while a live sandbox mounts the volume."""
        return self._tr.call("POST", f"/v1/volumes/{quote(name)}/restore", json={"snapshot": snapshot}, idempotent=True)

    def create_from_snapshot(self, name: str, volume: str, snapshot: str) -> t.Volume:
        """Makes volume ``name`` holding the files of ``snapshot`` of your volume ``volume``, of
        the snapshot's size (shorthand for :meth:`create` with ``from_snapshot``)."""
        return self.create({"name": name, "from_snapshot": {"volume": volume, "snapshot": snapshot}})


class Webhooks(_NS):
    """Outgoing webhooks: endpoints that receive the audit events they name, signed in the
    Standard Webhooks format (scope webhooks:admin)."""

    @_op("listWebhooks")
    def list(self) -> List[t.Webhook]:
        """The endpoints (the config file's first, then the API's) with their delivery state."""
        return list(self._tr.call("GET", "/v1/webhooks", idempotent=True).get("webhooks") or [])

    @_op("getWebhook")
    def get(self, name: str) -> t.Webhook:
        return self._tr.call("GET", f"/v1/webhooks/{quote(name)}", idempotent=True)

    @_op("createWebhook")
    def create(self, webhook: t.WebhookWrite | Mapping[str, Any]) -> t.Webhook:
        """Adds an endpoint; it gets the events written from now on."""
        return self._tr.call("POST", "/v1/webhooks", json=dict(webhook))

    @_op("updateWebhook")
    def update(self, name: str, webhook: t.WebhookWrite | Mapping[str, Any]) -> t.Webhook:
        """Replaces an API-made endpoint's definition; it keeps its place in the log."""
        return self._tr.call("PUT", f"/v1/webhooks/{quote(name)}", json=dict(webhook), idempotent=True)

    @_op("deleteWebhook")
    def delete(self, name: str) -> None:
        """Stops and removes an API-made endpoint."""
        self._tr.call("DELETE", f"/v1/webhooks/{quote(name)}", idempotent=True)

    @_op("testWebhook")
    def test(self, name: str) -> t.WebhookTestResult:
        """Sends a signed ``webhook.test`` ping now and reports what the receiver answered (a
        refusal is ``ok`` False, not an exception)."""
        return self._tr.call("POST", f"/v1/webhooks/{quote(name)}/test")


class Middleware(_NS):
    """Request middleware of the guard (docs/guardrails.md)."""

    @_op("listMiddleware")
    def list(self) -> List[t.Middleware]:
        return list(self._tr.call("GET", "/v1/middleware", idempotent=True).get("middleware") or [])

    @_op("getMiddleware")
    def get(self, name: str) -> t.Middleware:
        return self._tr.call("GET", f"/v1/middleware/{quote(name)}", idempotent=True)

    @_op("putMiddleware")
    def put(self, name: str, spec: t.MiddlewareWrite | Mapping[str, Any]) -> t.Middleware:
        return self._tr.call("PUT", f"/v1/middleware/{quote(name)}", json=dict(spec), idempotent=True)

    @_op("deleteMiddleware")
    def delete(self, name: str) -> None:
        self._tr.call("DELETE", f"/v1/middleware/{quote(name)}", idempotent=True)

    @_op("testMiddleware")
    def test(self, request: t.MiddlewareTestRequest | Mapping[str, Any]) -> t.MiddlewareVerdict:
        return self._tr.call("POST", "/v1/middleware/test", json=dict(request), idempotent=True)


class Monitor(_NS):
    """The agent monitor: ingested agent events."""

    @_op("ingestMonitorEvents")
    def ingest(self, request: t.MonitorIngestRequest | Mapping[str, Any]) -> t.MonitorIngestResult:
        return self._tr.call("POST", "/v1/monitor/events", json=dict(request))

    @_op("listMonitorEvents")
    def events(self, **query: Any) -> t.MonitorList:
        """One page of events; filters: agent, principal, sandbox, session, kind, since, until,
        cursor, limit, wait."""
        return self._tr.call("GET", "/v1/monitor/events", query=query, idempotent=True)

    @_op("getMonitorEvent")
    def get(self, id: str) -> t.MonitorEvent:
        return self._tr.call("GET", f"/v1/monitor/events/{quote(id)}", idempotent=True)

    @_op("redactMonitorEvent")
    def redact(self, id: str) -> t.MonitorEvent:
        return self._tr.call("POST", f"/v1/monitor/events/{quote(id)}/redact", idempotent=True)

    @_op("claudeCodeHook")
    def claude_code_hook(self, payload: t.ClaudeCodeHookInput | Mapping[str, Any]) -> t.ClaudeCodeHookOutput:
        return self._tr.call("POST", "/v1/monitor/hooks/claude-code", json=dict(payload))


class LLM(_NS):
    """The LLM gateway's prices and budgets."""

    @_op("getLLMPrices")
    def prices(self) -> t.LLMPrices:
        return self._tr.call("GET", "/v1/llm/prices", idempotent=True)

    @_op("setLLMPrices")
    def set_prices(self, prices: t.LLMPrices | Mapping[str, Any]) -> t.LLMPrices:
        return self._tr.call("PUT", "/v1/llm/prices", json=dict(prices), idempotent=True)

    @_op("resetLLMPrices")
    def reset_prices(self) -> t.LLMPrices:
        return self._tr.call("DELETE", "/v1/llm/prices", idempotent=True)

    @_op("getLLMBudgets")
    def budgets(self) -> t.LLMBudgets:
        return self._tr.call("GET", "/v1/llm/budgets", idempotent=True)

    @_op("setLLMBudgets")
    def set_budgets(self, budgets: t.LLMBudgets | Mapping[str, Any]) -> t.LLMBudgets:
        return self._tr.call("PUT", "/v1/llm/budgets", json=dict(budgets), idempotent=True)

    @_op("resetLLMBudgets")
    def reset_budgets(self) -> t.LLMBudgets:
        return self._tr.call("DELETE", "/v1/llm/budgets", idempotent=True)


class Snapshots(_NS):
    """Filesystem snapshots of sandboxes: list, get, delete, promote to a template."""

    @_op("listSnapshots")
    def list(self, *, sandbox: str | None = None) -> List[t.Snapshot]:
        """Your snapshots, oldest first (``sandbox``: those of one sandbox)."""
        r = self._tr.call("GET", "/v1/snapshots", query={"sandbox": sandbox}, idempotent=True)
        return list(r.get("snapshots") or [])

    @_op("getSnapshot")
    def get(self, name: str) -> t.Snapshot:
        return self._tr.call("GET", f"/v1/snapshots/{quote(name)}", idempotent=True)

    @_op("deleteSnapshot")
    def delete(self, name: str) -> None:
        self._tr.call("DELETE", f"/v1/snapshots/{quote(name)}", idempotent=True)

    @_op("promoteSnapshot")
    def promote(self, name: str, template: str) -> t.Template:
        """Makes (or re-points) template ``name[:tag]`` at the snapshot."""
        return self._tr.call("POST", f"/v1/snapshots/{quote(name)}/promote", json={"template": template})


# ---------------------------------------------------------------- client


class Warden:
    """A client of one Warden daemon.

    ``base_url`` is http(s)://host:port or unix:///path/to/socket; without it the client
    uses $WARDEN_URL, then the daemon's unix socket when it is there, then
    http://127.0.0.1:7070. ``api_key`` defaults to $WARDEN_API_KEY, then the daemon's first
    admin key (/var/lib/warden/admin.key) when readable, like the CLI. ``timeout`` (seconds)
    bounds connecting and waiting for each response (streams then run as long as they last).
    Idempotent calls are retried on 429 and 503 as ``retry`` allows.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, timeout: float | None = 120.0,
                 retry: RetryPolicy | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self._tr = Transport(base_url, api_key, timeout=timeout, retry=retry, ssl_context=ssl_context)
        self.sandboxes = Sandboxes(self)
        self.templates = Templates(self)
        self.secrets = Secrets(self)
        self.keys = Keys(self)
        self.principals = Principals(self)
        self.audit = Audit(self)
        self.policies = Policies(self)
        self.approvals = Approvals(self)
        self.mcp = MCP(self)
        self.agents = Agents(self)
        self.volumes = Volumes(self)
        self.middleware = Middleware(self)
        self.monitor = Monitor(self)
        self.llm = LLM(self)
        self.snapshots = Snapshots(self)
        self.webhooks = Webhooks(self)

    @property
    def base_url(self) -> str:
        return self._tr.base_url

    def __enter__(self) -> "Warden":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Releases the client (it holds no pooled connections today)."""

    def create_sandbox(self, template: str | None = None, **kw: Any) -> Sandbox:
        """Shorthand for ``client.sandboxes.create``."""
        return self.sandboxes.create(template, **kw)

    def sandbox(self, ref: str) -> Sandbox:
        """Shorthand for ``client.sandboxes.get``."""
        return self.sandboxes.get(ref)

    @_op("getHealth")
    def health(self) -> t.Health:
        return self._tr.call("GET", "/healthz", idempotent=True)

    @_op("whoami")
    def whoami(self) -> t.Whoami:
        return self._tr.call("GET", "/v1/whoami", idempotent=True)

    @_op("getMetrics")
    def metrics(self) -> str:
        """The Prometheus metrics, as text (scope metrics:read)."""
        with self._tr.request("GET", "/metrics", accept="text/plain", idempotent=True) as r:
            return r.read().decode()

    @_op("getOpenAPI")
    def openapi(self) -> str:
        """The daemon's OpenAPI document, as YAML text."""
        with self._tr.request("GET", "/v1/openapi.yaml", accept="application/yaml", idempotent=True) as r:
            return r.read().decode()

    @_op("getUsage")
    def usage(self, *, group_by: str | None = None, since: str | None = None, until: str | None = None,
              principal: str | None = None, agent: str | None = None) -> t.UsageReport:
        """The usage report (sandbox resources and LLM tokens)."""
        return self._tr.call("GET", "/v1/usage", query={"group_by": group_by, "since": since, "until": until,
                                                         "principal": principal, "agent": agent}, idempotent=True)

    @_op("readPresignedFile")
    def read_presigned(self, url: str) -> Response:
        """Opens a presigned read URL (no API key is sent) as a stream."""
        return _presigned(self, "GET", url, None)

    @_op("writePresignedFile")
    def write_presigned(self, url: str, data: Body) -> t.Entry:
        """Uploads data (streamed) to a presigned write URL (no API key is sent)."""
        return _presigned(self, "PUT", url, data).json()


def _transport_url(tr: TransportBase) -> str:
    """The base URL a transport was made from, for another transport to the same daemon."""
    return "unix://" + tr.endpoint.socket_path if tr.endpoint.scheme == "unix" else tr.base_url


def _presigned(c: Warden, method: str, url: str, data: Body) -> Response:
    import urllib.parse as up
    u = up.urlsplit(url)
    tr = Transport(c._tr.base_url if c._tr.endpoint.scheme != "unix" else "unix://" + c._tr.endpoint.socket_path,
                   api_key="", timeout=c._tr.timeout, retry=c._tr.retry, ssl_context=c._tr.ssl_context)
    if u.scheme in ("http", "https") and u.netloc:
        tr = Transport(f"{u.scheme}://{u.netloc}", api_key="", timeout=c._tr.timeout, retry=c._tr.retry,
                       ssl_context=c._tr.ssl_context)
    path = u.path + ("?" + u.query if u.query else "")
    return tr.request(method, path, body=data if method == "PUT" else None,
                      content_type="application/octet-stream", accept="*/*",
                      idempotent=method == "GET" or not _is_iter(data), stream=True)


def copy_stream(src: IO[bytes], dst: IO[bytes]) -> int:
    """Copies a binary stream in chunks; returns the byte count."""
    n = 0
    while True:
        b = src.read(CHUNK)
        if not b:
            return n
        dst.write(b)
        n += len(b)

