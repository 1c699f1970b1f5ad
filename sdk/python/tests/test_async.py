"""The asyncio client: native asyncio (no worker threads), typed, streams as async iterators."""

import asyncio
import os
import threading
import uuid

import pytest

import warden
from warden import aio


def _run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_async_client() -> None:
    async def main() -> None:
        threads = threading.active_count()
        async with warden.AsyncWarden() as c:
            assert (await c.health())["status"] == "ok"
            async with await c.sandboxes.create(timeout_seconds=120) as sb:
                seen: list[str] = []

                async def on_out(text: str) -> None:  # async callbacks are awaited
                    seen.append(text)
                r = await sb.exec("echo async", on_stdout=on_out)
                assert r.stdout == "async\n" and seen == ["async\n"]
                assert (await sb.exec(["cat"], input="fed")).stdout == "fed"
                await sb.files.write("/tmp/a.txt", "A")
                assert await sb.files.read_text("/tmp/a.txt") == "A"
                assert await sb.files.exists("/tmp/a.txt")
                assert [e["name"] for e in await sb.files.list("/tmp")].count("a.txt") == 1
                p = await sb.start(["sh", "-c", "echo 1; echo 2"])
                texts = [piece.text async for piece in p]
                assert "".join(texts) == "1\n2\n"
                # many calls at once, on one loop, and no thread was started for them
                rs = await asyncio.gather(*(sb.exec(f"echo {i}") for i in range(5)))
                assert [x.stdout for x in rs] == [f"{i}\n" for i in range(5)]
                assert threading.active_count() == threads
                chunks = [b async for b in sb.files.iter_bytes("/tmp/a.txt")]
                assert b"".join(chunks) == b"A"
                ex = await sb.run_code("1 + 1")
                assert ex.text == "2"
                logs = [ev async for ev in sb.logs()]
                assert isinstance(logs, list)
                sid = sb.id
            # async with killed it
            with pytest.raises(warden.ConflictError):
                await (await c.sandboxes.get(sid)).exec("true")
            with pytest.raises(warden.NotFoundError):
                await c.sandboxes.get("sb-missing")
    _run(main())


def test_async_is_native() -> None:
    """The client is built on asyncio streams: no to_thread, no synchronous Warden inside."""
    c = warden.AsyncWarden()
    assert isinstance(c._tr, aio.AsyncTransport)
    src = open(aio.__file__, encoding="utf-8").read()
    assert "to_thread(self._target" not in src and "Warden(*args" not in src


def test_async_generated_part_is_current() -> None:
    """tools/gen_aio.py copies the request building of client.py into aio.py."""
    import subprocess
    import sys
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, os.path.join(here, "tools", "gen_aio.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_async_has_every_method() -> None:
    """Every public method of the synchronous client has an asyncio twin."""
    pairs = [(warden.Warden, aio.AsyncWarden), (warden.Sandbox, aio.AsyncSandbox), (warden.Files, aio.AsyncFiles)]
    from warden import client as sync
    for name in ("Sandboxes", "Templates", "Secrets", "Keys", "Principals", "Audit", "Policies", "Approvals",
                 "MCP", "Agents", "Volumes", "Middleware", "Monitor", "LLM", "Snapshots"):
        pairs.append((getattr(sync, name), getattr(aio, "Async" + name)))
    missing = [f"{s.__name__}.{m}" for s, a in pairs for m in dir(s)
               if not m.startswith("_") and callable(getattr(s, m)) and not hasattr(a, m)]
    assert missing == []


def test_async_reattach_from_a_second_client(sandbox: warden.Sandbox) -> None:
    async def main() -> None:
        c1, c2 = warden.AsyncWarden(), warden.AsyncWarden()
        sb1 = await c1.sandboxes.get(sandbox.id)
        p = await sb1.start(["sh", "-c", "read x; echo got $x; sleep 30"], stdin=True, tag="aio-bg")
        await p.disconnect()
        sb2 = await c2.sandbox(sandbox.id)
        q = await sb2.attach(p.pid)
        await sb2.send_stdin(p.pid, b"hi\n")
        async for piece in q:
            if "got hi" in piece.text:
                break
        await q.kill()
        await q.close()
    _run(main())


def test_async_cancel_closes_the_stream_not_the_process(sandbox: warden.Sandbox) -> None:
    async def main() -> None:
        c = warden.AsyncWarden()
        sb = await c.sandboxes.get(sandbox.id)
        p = await sb.start(["sh", "-c", "echo first; sleep 30; echo late"], tag="cancel")

        async def read_all() -> list[str]:
            return [piece.text async for piece in p]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(read_all(), timeout=2)
        # the stream is gone, the process is not
        procs = {x["pid"]: x for x in await sb.processes()}
        assert not procs[p.pid]["exited"]
        await sb.signal(p.pid, "SIGKILL")
    _run(main())


def test_async_errors_and_streams_over_the_socket() -> None:
    sock = os.environ.get("WARDEN_SOCKET")
    if not sock:
        pytest.skip("SKIP: WARDEN_SOCKET (the daemon's unix socket) is not set")

    async def main() -> None:
        async with warden.AsyncWarden("unix://" + sock) as c:
            assert (await c.whoami())["principal"]["id"]
            with pytest.raises(warden.NotFoundError) as ei:
                await c.policies.get("pol-missing-" + uuid.uuid4().hex[:6])
            assert ei.value.status == 404 and ei.value.code
            async with await c.sandboxes.create(timeout_seconds=120) as sb:
                data = os.urandom(3 << 20)
                await sb.files.write("/tmp/big.bin", data)  # Content-Length
                await sb.files.write("/tmp/chunked.bin", (data[i:i + 65536] for i in range(0, len(data), 65536)))

                async def agen():  # type: ignore[no-untyped-def]
                    for i in range(0, len(data), 1 << 20):
                        yield data[i:i + (1 << 20)]
                await sb.files.write("/tmp/async.bin", agen())  # chunked, from an async iterable
                for path in ("/tmp/big.bin", "/tmp/chunked.bin", "/tmp/async.bin"):
                    assert await sb.files.read_bytes(path) == data
                async with await sb.pty("sh", cols=80, rows=24) as t:
                    await t.write("echo pty-$((6*7)); exit 3\n")
                    out = b""
                    async for b in t:
                        out += b
                    assert b"pty-42" in out and t.exit_code == 3
    _run(main())


def test_async_64_mib_streamed_both_ways(sandbox: warden.Sandbox, tmp_path: "os.PathLike[str]") -> None:
    """The asyncio client streams a 64 MiB file up (from a local file, chunked) and down (to a
    local file) holding a chunk at a time: the Python heap's peak stays a few MiB."""
    import hashlib
    import tracemalloc
    src, dst = os.path.join(tmp_path, "src.bin"), os.path.join(tmp_path, "dst.bin")
    h = hashlib.sha256()
    with open(src, "wb") as f:
        for _ in range(64):
            b = os.urandom(1 << 20)
            h.update(b)
            f.write(b)

    async def main() -> tuple[int, int]:
        c = warden.AsyncWarden()
        sb = await c.sandbox(sandbox.id)
        entry = await sb.files.upload("/tmp/aio-64.bin", src)
        n = await sb.files.download("/tmp/aio-64.bin", dst)
        await sb.files.remove("/tmp/aio-64.bin")
        return entry["size"], n
    tracemalloc.start()
    try:
        up, down = _run(main())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"\nasyncio: 64 MiB up and down, Python heap peak {peak / (1 << 20):.1f} MiB")
    assert up == down == 64 << 20
    got = hashlib.sha256()
    with open(dst, "rb") as f:
        while b := f.read(1 << 20):
            got.update(b)
    assert got.hexdigest() == h.hexdigest()
    assert peak < 16 << 20, f"heap peak {peak / (1 << 20):.1f} MiB while streaming 64 MiB"
