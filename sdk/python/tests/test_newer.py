"""The newer endpoints end to end: hosted agents (create, run, runs, logs, cancel) and their
memory, the monitor (ingest, then the timeline), middleware, LLM budgets and usage, approvals
(an action held, then approved and retried, or rejected)."""

from __future__ import annotations

import uuid

import pytest

import warden
from warden import _types as t


def _wait_run(client: warden.Warden, run_id: str) -> t.AgentRun:
    return client.agents.wait_run(run_id, timeout=120, poll=0.2)


def test_agents(client: warden.Warden) -> None:
    name = "py-" + uuid.uuid4().hex[:6]
    a = client.agents.create({"name": name, "command": ["sh", "-c", "echo agent says $WARDEN_RUN_INPUT; echo oops >&2"],
                              "concurrency": 2, "limits": {"timeout_seconds": 120}})
    assert a["name"] == name and a["version"] == 1
    try:
        assert name in [x["name"] for x in client.agents.list()]
        a2 = client.agents.update(name, {"name": name, "command": ["sh", "-c", "echo agent says $WARDEN_RUN_INPUT"],
                                         "concurrency": 2, "limits": {"timeout_seconds": 120}})
        assert a2["version"] == 2
        assert [v["version"] for v in client.agents.versions(name)][:2] in ([2, 1], [1, 2])
        run = client.agents.run(name, "hello")
        assert run["agent"] == name if "agent" in run else True
        done = _wait_run(client, run["id"])
        assert done["state"] == "succeeded", done
        lines = list(client.agents.run_logs(run["id"]))
        assert 'agent says "hello"' in "".join(x["data"] for x in lines), lines
        assert run["id"] in [r["id"] for r in client.agents.runs(name)]
        # a long run, cancelled
        client.agents.update(name, {"name": name, "command": ["sleep", "60"], "concurrency": 2,
                                    "limits": {"timeout_seconds": 120}})
        slow = client.agents.run(name)
        client.agents.cancel_run(slow["id"])
        assert _wait_run(client, slow["id"])["state"] == "cancelled"
        # memory: nothing written by these runs; the routes answer with their shapes
        assert client.agents.memory(name) == []
        assert list(client.agents.memory_export(name)) == []
        with pytest.raises(warden.NotFoundError):
            client.agents.memory_entry(name, "no/such/key")
    finally:
        client.agents.delete(name)
    with pytest.raises(warden.NotFoundError):
        client.agents.get(name)


def test_monitor_ingest_and_timeline(client: warden.Warden) -> None:
    session = "py-" + uuid.uuid4().hex[:8]
    res = client.monitor.ingest({"events": [
        {"kind": "tool_call", "session": session, "action": "search", "target": "docs", "outcome": "success"},
        {"kind": "llm.prompt", "session": session, "content": "what is warden?"},
    ]})
    assert res["accepted"] == 2 and len(res["ids"]) == 2
    page = client.monitor.events(session=session, limit=10)
    evs = page["events"]
    assert {e["kind"] for e in evs} >= {"tool_call", "llm.prompt"}, evs
    one = client.monitor.get(res["ids"][0])
    assert one["id"] == res["ids"][0]
    with pytest.raises(warden.ValidationError):
        client.monitor.ingest({"events": [{"kind": "Not A Kind"}]})


def test_middleware(client: warden.Warden) -> None:
    name = "py-" + uuid.uuid4().hex[:6]
    script = "function pre(action) { if (action.kind == 'exec') return {block: 'no exec'}; }"
    mw = client.middleware.put(name, {"kinds": ["exec"], "script": script, "disabled": True,
                                      "max_memory_mb": 256, "timeout_ms": 5000})
    assert mw["name"] == name and mw["source"] == "api"
    try:
        assert name in [m["name"] for m in client.middleware.list()]
        assert client.middleware.get(name)["disabled"] is True
        v = client.middleware.test({"name": name, "action": {"kind": "exec"}})
        assert v["middleware"] == name and v["action"] == "block" and v["message"] == "no exec", v
    finally:
        client.middleware.delete(name)
    with pytest.raises(warden.NotFoundError):
        client.middleware.get(name)


def test_llm_budgets_and_usage(client: warden.Warden) -> None:
    before = client.llm.budgets()
    name = "py-" + uuid.uuid4().hex[:6]
    if before.get("source") == "config" and before.get("budgets"):
        pytest.skip("SKIP: the daemon's budgets come from its config file")
    got = client.llm.set_budgets({"budgets": [{"name": name, "principal": "*", "period": "day", "tokens": 1000}]})
    try:
        assert [b["name"] for b in got["budgets"]] == [name]
        assert client.llm.budgets()["budgets"][0]["name"] == name
    finally:
        client.llm.reset_budgets()
    rep = client.usage(group_by="principal")
    assert "rows" in rep


def test_approvals_hold_approve_reject(client: warden.Warden) -> None:
    """A policy holds a principal's exec for approval: the error maps to ApprovalRequiredError
    with the approval's id; once approved, the identical retry passes; a rejected one is denied."""
    p = client.principals.create("py-appr-" + uuid.uuid4().hex[:6])
    key = client.keys.create(["sandboxes:create", "sandboxes:read", "sandboxes:delete", "sandboxes:exec"],
                             principal_id=p["id"])
    pol_id = "py-appr-" + uuid.uuid4().hex[:6]
    client.policies.create({"id": pol_id, "name": "hold exec", "scope": {"kind": "principal", "id": p["id"]},
                            "rules": [{"id": "hold", "kinds": ["exec"], "outcome": "require_approval",
                                       "message": "needs a human"}]})
    agent = warden.Warden(client.base_url if client._tr.endpoint.scheme != "unix" else None, key["key"])
    try:
        with agent.sandboxes.create(timeout_seconds=120) as sb:
            with pytest.raises(warden.ApprovalRequiredError) as ei:
                sb.exec("echo approved")
            aid = ei.value.approval_id
            assert aid and client.approvals.get(aid)["state"] == "pending"
            assert aid in [a["id"] for a in client.approvals.list(state="pending")]
            assert client.approvals.approve(aid, "fine")["state"] == "approved"
            assert sb.exec("echo approved").stdout == "approved\n"
            with pytest.raises(warden.ApprovalRequiredError) as ei2:
                sb.exec("echo other")
            assert client.approvals.reject(ei2.value.approval_id, "no")["state"] == "rejected"
            with pytest.raises((warden.ForbiddenError, warden.PermissionDeniedError)):
                sb.exec("echo other")
    finally:
        client.policies.delete(pol_id)
        client.keys.revoke(key["api_key"]["id"])
