"""Volumes, hosted agents, middleware, the monitor, LLM prices and budgets, usage: the SDK's
paths and shapes against the daemon."""

import uuid

import pytest

import warden


def test_volumes(client: warden.Warden) -> None:
    name = "py-" + uuid.uuid4().hex[:6]
    v = client.volumes.create({"name": name, "size_mb": 16})
    assert v["name"] == name
    try:
        assert name in [x["name"] for x in client.volumes.list()]
        assert client.volumes.get(name)["name"] == name
        w = client.volumes.write(name, "dir/a.txt", "on the volume")
        assert w["size"] == len("on the volume")
        with client.volumes.open(name, "dir/a.txt") as r:
            assert r.read() == b"on the volume"
        client.volumes.resize(name, {"size_mb": 32})
    finally:
        client.volumes.delete(name)
    with pytest.raises(warden.NotFoundError):
        client.volumes.get(name)


def test_listings(client: warden.Warden) -> None:
    assert isinstance(client.agents.list(), list)
    with pytest.raises(warden.NotFoundError):
        client.agents.get("py-no-such-agent")
    assert isinstance(client.middleware.list(), list)
    assert "events" in client.monitor.events(limit=2)
    assert "prices" in client.llm.prices()
    assert "budgets" in client.llm.budgets()
    assert "rows" in client.usage()
