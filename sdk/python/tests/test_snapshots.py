"""Filesystem snapshots: take one, list and get it, start a sandbox from it, promote it to a
template, delete it."""

import uuid

import pytest

import warden


def test_snapshots(client: warden.Warden, sandbox: warden.Sandbox) -> None:
    name = "py-snap-" + uuid.uuid4().hex[:6]
    sandbox.files.write("/home/user/snap.txt", "kept in the snapshot")
    snap = sandbox.snapshot(name)
    assert snap["name"] == name and snap["sandbox_id"] == sandbox.id
    tpl = "py-snap-tpl-" + uuid.uuid4().hex[:6]
    try:
        assert name in [s["name"] for s in client.snapshots.list(sandbox=sandbox.id)]
        assert client.snapshots.get(name)["id"] == snap["id"]
        with client.sandboxes.create(snapshot=name, timeout_seconds=120) as sb:
            assert sb.files.read_text("/home/user/snap.txt") == "kept in the snapshot"
        t = client.snapshots.promote(name, tpl)
        assert t["name"] in (tpl, tpl + ":latest"), t["name"]
        client.templates.delete(t["name"])
    finally:
        client.snapshots.delete(name)
    with pytest.raises(warden.NotFoundError):
        client.snapshots.get(name)
