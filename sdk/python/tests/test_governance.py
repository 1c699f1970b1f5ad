"""Policies, dry runs, approvals, the guard, audit, and MCP administration."""

import json
import uuid

import pytest

import warden


def test_policies(client: warden.Warden) -> None:
    pid = "py-" + uuid.uuid4().hex[:6]
    pol = {"id": pid, "name": "py sdk", "scope": {"kind": "installation"},
           "rules": [{"id": "no-rm", "kinds": ["exec"], "when": "false", "outcome": "deny", "message": "no"}]}
    created = client.policies.create(pol)
    assert created["id"] == pid and created["version"] == 1
    assert pid in [p["id"] for p in client.policies.list()]
    pol["name"] = "py sdk v2"
    assert client.policies.update(pid, pol)["version"] == 2
    assert client.policies.get(pid, version=1)["name"] == "py sdk"
    res = client.policies.test(pol, limit=50)
    assert res["policy_id"] == pid and "counts" in res
    client.policies.delete(pid)
    with pytest.raises(warden.NotFoundError):
        client.policies.get(pid)
    with pytest.raises((warden.ValidationError, warden.BadRequestError)):
        client.policies.create({"id": "bad", "scope": {"kind": "installation"},
                                "rules": [{"id": "r", "when": "((", "outcome": "deny"}]})


def test_approvals(client: warden.Warden) -> None:
    assert isinstance(client.approvals.list(state="pending", limit=10), list)
    with pytest.raises(warden.NotFoundError):
        client.approvals.get("apr_missing")


def test_guard(client: warden.Warden) -> None:
    r = client.policies.test_guard(text="my key is AKIAIOSFODNN7EXAMPLE")
    assert isinstance(r["findings"], list)
    rows = [{"text": "my key AKIAIOSFODNN7EXAMPLE", "label": "secret"}, {"text": "hello there", "label": "none"}]
    report = client.policies.eval_guard((json.dumps(x).encode() + b"\n" for x in rows))  # streamed
    assert report["rows"] == 2 and report["groups"]


def test_audit(client: warden.Warden) -> None:
    evs = list(client.audit.events())
    assert evs and evs[0]["seq"] >= 1
    page = client.audit.page(limit=2)
    assert len(page["events"]) <= 2
    assert client.audit.verify()["ok"] is True


def test_mcp_admin(client: warden.Warden) -> None:
    cid = "py-" + uuid.uuid4().hex[:6]
    conn = client.mcp.create_connector({"id": cid, "kind": "builtin", "description": "sdk test", "spec": {}})
    assert conn["id"] == cid
    assert cid in [c["id"] for c in client.mcp.connectors()]
    assert client.mcp.get_connector(cid)["kind"] == "builtin"
    client.mcp.update_connector(cid, {"id": cid, "kind": "builtin", "description": "changed", "spec": {}})
    sid = "py-srv-" + uuid.uuid4().hex[:6]
    srv = client.mcp.create_server({"id": sid, "spec": {"connectors": [{"connector": cid}]}})
    assert srv["id"] == sid
    assert sid in [s["id"] for s in client.mcp.servers()]
    me = client.whoami()["principal"]["id"]
    client.mcp.grant(sid, me)
    assert me in [g["principal_id"] for g in client.mcp.grants(sid)]
    client.mcp.revoke(sid, me)
    assert isinstance(client.mcp.tools(connector=cid), list)
    client.mcp.delete_server(sid)
    client.mcp.delete_connector(cid)
    with pytest.raises(warden.NotFoundError):
        client.mcp.get_connector(cid)
