"""Principals, keys, whoami, and errors mapped to their classes."""

import uuid

import pytest

import warden


def test_principals_and_keys(client: warden.Warden) -> None:
    me = client.whoami()
    assert "admin" in me["key"]["scopes"]
    name = "py-agent-" + uuid.uuid4().hex[:6]
    agent = client.principals.create(name, kind="agent")
    assert agent["kind"] == "agent"
    assert agent["id"] in [p["id"] for p in client.principals.list()]

    created = client.keys.create(["sandboxes:read"], principal_id=agent["id"], name="reader")
    assert created["key"].startswith("wdn_")
    assert created["api_key"]["id"] in [k["id"] for k in client.keys.list()]

    reader = warden.Warden(api_key=created["key"])
    assert reader.whoami()["principal"]["id"] == agent["id"]
    with pytest.raises(warden.ForbiddenError) as ei:
        reader.sandboxes.create()
    assert ei.value.status == 403 and ei.value.code == "forbidden" and ei.value.request_id

    client.keys.revoke(created["api_key"]["id"])
    with pytest.raises(warden.AuthError) as ei2:
        reader.whoami()
    assert ei2.value.status == 401


def test_errors_map_to_classes(client: warden.Warden) -> None:
    with pytest.raises(warden.NotFoundError) as ei:
        client.sandboxes.get("sb-doesnotexist")
    assert ei.value.code == "not_found" and isinstance(ei.value, warden.APIError)
    with pytest.raises(warden.AuthError):
        warden.Warden(api_key="wdn_bogus").whoami()
    with pytest.raises((warden.ValidationError, warden.BadRequestError)):
        client.sandboxes.create(cpu_millis=-5)
    with pytest.raises(warden.ValidationError) as ei2:
        client.principals.create("x", kind="robot")  # type: ignore[arg-type]
    assert ei2.value.status == 422 and "robot" in ei2.value.message


def test_unix_socket(client: warden.Warden) -> None:
    import os
    sock = os.environ.get("WARDEN_SOCKET")
    if not sock:
        pytest.skip("SKIP: WARDEN_SOCKET (the daemon's unix socket) is not set")
    c = warden.Warden("unix://" + sock)
    assert c.health()["status"] == "ok"
    assert c.whoami()["principal"]["id"] == client.whoami()["principal"]["id"]


def test_health_metrics_openapi(client: warden.Warden) -> None:
    assert client.health()["status"] == "ok"
    assert "openapi:" in client.openapi()
    assert "# HELP" in client.metrics() or "# TYPE" in client.metrics()
