"""Secrets and their grants."""

import uuid

import pytest

import warden


def test_secrets(client: warden.Warden, sandbox: warden.Sandbox) -> None:
    name = "py_sdk_" + uuid.uuid4().hex[:6]
    s = client.secrets.put(name, "s3cr3t-value-123")
    assert s["name"] == name and "value" not in s
    assert s["id"] in [x["id"] for x in client.secrets.list()]
    g = client.secrets.grant(s["id"], hosts=["api.example.com"], sandbox=sandbox.id, header="Authorization")
    assert g["id"] and g["hosts"] == ["api.example.com"]
    assert g["id"] in [x["id"] for x in client.secrets.grants(s["id"])]
    client.secrets.revoke_grant(g["id"])
    client.secrets.revoke(s["id"])
    client.secrets.delete(s["id"])
    assert s["id"] not in [x["id"] for x in client.secrets.list()]
    with pytest.raises(warden.NotFoundError):
        client.secrets.delete("sec_nope")
