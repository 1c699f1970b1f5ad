"""Sandbox lifecycle: create, get, list, timeout, pause, resume, fork, network, usage, kill."""

from __future__ import annotations

import uuid

import pytest

import warden


def test_lifecycle(client: warden.Warden) -> None:
    name = "py-" + uuid.uuid4().hex[:8]
    with client.sandboxes.create(name=name, metadata={"suite": "python-sdk", "case": name},
                                 env={"GREETING": "hello"}, timeout_seconds=300) as sb:
        assert sb.id.startswith("sb-")
        assert sb.state == "running"
        assert sb.info["name"] == name
        assert "GREETING" in sb.info["env_keys"]
        assert sb.exec("echo $GREETING").stdout == "hello\n"

        # get by id and by name
        assert client.sandboxes.get(sb.id).id == sb.id
        assert client.sandbox(name).id == sb.id

        # list with a metadata filter, following pages
        ids = [s["id"] for s in client.sandboxes.list(metadata={"case": name})]
        assert ids == [sb.id]
        page = client.sandboxes.list_page(state="running", limit=1)
        assert len(page["sandboxes"]) <= 1

        info = sb.set_timeout(600)
        assert info["expires_at"]

        assert sb.pause()["state"] == "paused"
        assert sb.resume()["state"] == "running"
        assert sb.exec("true").ok

        u = sb.usage()
        assert "memory_bytes" in u

        # the native backend cannot fork (gvisor can): a conflict naming why
        with pytest.raises(warden.ConflictError, match="not supported"):
            sb.fork(1)
    # the context manager killed it
    assert client.sandboxes.info(sb.id)["state"] in ("stopping", "stopped")
    with pytest.raises(warden.ConflictError):
        sb.exec("true")


def test_fork(client: warden.Warden) -> None:
    if "gvisor" not in client.health().get("backends", []):
        pytest.skip("SKIP: fork needs the gvisor backend (runsc), which this daemon lacks")
    with client.sandboxes.create(isolation="gvisor", timeout_seconds=180) as sb:
        sb.exec("echo state > /tmp/state")
        forks = sb.fork(1, timeout_seconds=120, metadata={"forked": "yes"})
        assert len(forks) == 1
        for child in forks:
            with child:
                assert child.id != sb.id
                assert child.info["metadata"].get("forked") == "yes"
                assert child.files.read_text("/tmp/state") == "state\n"


def test_network(client: warden.Warden) -> None:
    with client.sandboxes.create(network={"mode": "none"}, timeout_seconds=120) as sb:
        st = sb.network()
        assert st["policy"]["mode"] == "none"
        st = sb.set_network("allowlist", ["example.com"])
        assert st["policy"]["mode"] == "allowlist"
        assert {"host": "example.com"}.items() <= st["policy"]["allow"][0].items()


def test_logs(sandbox: warden.Sandbox) -> None:
    p = sandbox.start("echo logged-line", tag="logs")
    p.wait()
    found = False
    for ev in sandbox.logs(pid=p.pid):
        if ev["stream"] == "stdout":
            import base64
            found = found or b"logged-line" in base64.b64decode(ev["data"])
    assert found
