"""Files: text and bytes, streaming, list, stat, mkdir, move, remove, watch, URLs, archives."""

from __future__ import annotations

import hashlib
import io
import os
import resource
import tarfile
import threading
import urllib.request

import pytest

import warden

MiB = 1 << 20


def test_text_and_bytes(sandbox: warden.Sandbox) -> None:
    f = sandbox.files
    e = f.write("/tmp/files/a.txt", "héllo\n", mode=0o600)
    assert e["size"] == len("héllo\n".encode()) and e["mode"].endswith("600")
    assert f.read_text("/tmp/files/a.txt") == "héllo\n"
    blob = bytes(range(256)) * 10
    f.write("/tmp/files/b.bin", blob)
    assert f.read_bytes("/tmp/files/b.bin") == blob
    with f.open("/tmp/files/b.bin", offset=10, length=5) as r:
        assert r.read() == blob[10:15]
    f.write("/tmp/files/it.txt", (s.encode() for s in ["x", "y", "z"]))
    assert f.read("/tmp/files/it.txt") == "xyz"
    f.write("/tmp/files/io.txt", io.BytesIO(b"from a file object"))
    assert f.read("/tmp/files/io.txt") == "from a file object"


def test_list_stat_mkdir_move_remove(sandbox: warden.Sandbox) -> None:
    f = sandbox.files
    assert f.mkdir("/tmp/tree/sub")["type"] == "dir"
    f.write("/tmp/tree/sub/one", "1")
    f.write("/tmp/tree/two", "22")
    names = sorted(e["name"] for e in f.list("/tmp/tree"))
    assert names == ["sub", "two"]
    deep = sorted(e["path"] for e in f.list("/tmp/tree", depth=2))
    assert "/tmp/tree/sub/one" in deep
    st = f.stat("/tmp/tree/two")
    assert st["size"] == 2 and st["type"] == "file"
    f.move("/tmp/tree/two", "/tmp/tree/three")
    assert f.exists("/tmp/tree/three") and not f.exists("/tmp/tree/two")
    f.remove("/tmp/tree/three")
    with pytest.raises(warden.NotFoundError):
        f.stat("/tmp/tree/three")
    with pytest.raises(warden.NotFoundError):
        f.read_text("/tmp/tree/none")


def test_watch(sandbox: warden.Sandbox) -> None:
    sandbox.files.mkdir("/tmp/watched")
    seen: list[tuple[str, str]] = []
    with sandbox.files.watch("/tmp/watched") as w:
        def writer() -> None:
            sandbox.files.write("/tmp/watched/new.txt", "x")
        th = threading.Thread(target=writer)
        th.start()
        for ev in w:
            seen.append((ev.get("event", ""), ev.get("name", "")))
            if ev.get("name") == "new.txt":
                break
        th.join()
    assert any(name == "new.txt" for _, name in seen), seen


def test_presigned_urls(client: warden.Warden, sandbox: warden.Sandbox) -> None:
    up = sandbox.files.upload_url("/tmp/presigned.txt", expires_seconds=60)
    assert "sig=" in up
    e = client.write_presigned(up, b"via url")
    assert e["size"] == 7
    down = sandbox.files.download_url("/tmp/presigned.txt")
    with client.read_presigned(down) as r:
        assert r.read() == b"via url"
    # a presigned URL needs no key: plain urllib works
    with urllib.request.urlopen(down) as r:
        assert r.read() == b"via url"


def test_archive_round_trip(sandbox: warden.Sandbox) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        data = b"in the archive"
        ti = tarfile.TarInfo("dir/f.txt")
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    sandbox.files.upload_archive("/tmp/arch", buf.getvalue())
    assert sandbox.files.read("/tmp/arch/dir/f.txt") == "in the archive"
    with sandbox.files.download_archive("/tmp/arch") as r:
        got = r.read()
    names = tarfile.open(fileobj=io.BytesIO(got)).getnames()
    assert any(n.endswith("dir/f.txt") for n in names), names


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def test_100_mib_streamed_both_ways(sandbox: warden.Sandbox, tmp_path: "os.PathLike[str]") -> None:
    """100 MiB go up from a generator and come down to a file without being held in memory:
    the peak RSS of this process stays far below 100 MiB above where it started."""
    size = 100 * MiB
    chunk = bytes(range(256)) * 4096  # 1 MiB

    def gen():
        for _ in range(size // len(chunk)):
            yield chunk
    before = _rss_mib()
    e = sandbox.files.write("/tmp/big.bin", gen())
    assert e["size"] == size
    after_up = _rss_mib()
    h = hashlib.md5()
    for _ in range(size // len(chunk)):
        h.update(chunk)
    dest = os.path.join(os.fspath(tmp_path), "big.bin")
    n = sandbox.files.download("/tmp/big.bin", dest)
    after_down = _rss_mib()
    assert n == size and os.path.getsize(dest) == size
    hd = hashlib.md5()
    with open(dest, "rb") as fh:
        while b := fh.read(MiB):
            hd.update(b)
    assert hd.hexdigest() == h.hexdigest()
    print(f"\npeak RSS: {before:.1f} MiB before, {after_up:.1f} MiB after 100 MiB up, "
          f"{after_down:.1f} MiB after 100 MiB down")
    assert after_down - before < 40, f"peak RSS grew by {after_down - before:.1f} MiB moving 100 MiB"
