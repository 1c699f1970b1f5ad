"""The asyncio client."""

import asyncio

import pytest

import warden


def test_async_client() -> None:
    async def main() -> None:
        async with warden.AsyncWarden() as c:
            assert (await c.health())["status"] == "ok"
            async with await c.sandboxes.create(timeout_seconds=120) as sb:
                r = await sb.exec("echo async")
                assert r.stdout == "async\n"
                await sb.files.write("/tmp/a.txt", "A")
                assert await sb.files.read_text("/tmp/a.txt") == "A"
                p = await sb.start(["sh", "-c", "echo 1; echo 2"])
                texts = [piece.text async for piece in p]
                assert "".join(texts) == "1\n2\n"
                # many calls at once, on one loop
                rs = await asyncio.gather(*(sb.exec(f"echo {i}") for i in range(5)))
                assert [x.stdout for x in rs] == [f"{i}\n" for i in range(5)]
                chunks = [b async for b in await sb.files.iter_bytes("/tmp/a.txt")]
                assert b"".join(chunks) == b"A"
                sid = sb.id
            with pytest.raises(warden.ConflictError):
                await (await c.sandboxes.get(sid)).exec("true")
            with pytest.raises(warden.NotFoundError):
                await c.sandboxes.get("sb-missing")
    asyncio.run(main())


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
    asyncio.run(main())
