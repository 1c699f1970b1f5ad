// The newer endpoints end to end: hosted agents (create, run, runs, logs, cancel) and their
// memory, the monitor (ingest, then the timeline), middleware, LLM budgets and usage,
// approvals (an action held, then approved and retried, or rejected); and the unix socket.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  Warden, NotFoundError, ValidationError, ApprovalRequiredError, ForbiddenError, APIError, defaultSocket, types as T,
} from "../src/index.js";
import { uid } from "./helpers.js";

const client = new Warden();

const waitRun = (id: string) => client.agents.waitRun(id, { timeoutMs: 120_000, pollMs: 200 });

describe("newer endpoints", () => {
  test("agents: create, run, runs, logs, cancel, memory", async () => {
    const name = "ts-" + uid();
    const spec: T.AgentSpec = { name, command: ["sh", "-c", "echo agent says $WARDEN_RUN_INPUT"], concurrency: 2,
      limits: { timeout_seconds: 120 } };
    const a = await client.agents.create(spec);
    assert.equal(a.name, name);
    try {
      assert.ok((await client.agents.list()).some((x) => x.name === name));
      const run = await client.agents.run(name, "hello");
      assert.equal((await waitRun(run.id)).state, "succeeded");
      let text = "";
      for await (const line of client.agents.runLogs(run.id)) text += line.data;
      assert.ok(text.includes('agent says "hello"'), text);
      assert.ok((await client.agents.runs(name)).some((r) => r.id === run.id));
      await client.agents.update(name, { ...spec, command: ["sleep", "60"] });
      assert.equal((await client.agents.versions(name)).length, 2);
      const slow = await client.agents.run(name);
      await client.agents.cancelRun(slow.id);
      assert.equal((await waitRun(slow.id)).state, "cancelled");
      assert.deepEqual(await client.agents.memory(name), []);
      const exported: T.MemoryEntry[] = [];
      for await (const e of client.agents.memoryExport(name)) exported.push(e);
      assert.deepEqual(exported, []);
      await assert.rejects(client.agents.memoryEntry(name, "no/such/key"), NotFoundError);
    } finally {
      await client.agents.delete(name);
    }
    await assert.rejects(client.agents.get(name), NotFoundError);
  });

  test("monitor: ingest, then the timeline", async () => {
    const session = "ts-" + uid();
    const res = await client.monitor.ingest({ events: [
      { kind: "tool_call", session, action: "search", target: "docs", outcome: "success" },
      { kind: "llm.prompt", session, content: "what is warden?" },
    ] });
    assert.equal(res.accepted, 2);
    const page = await client.monitor.events({ session, limit: 10 });
    const kinds = new Set(page.events.map((e) => e.kind));
    assert.ok(kinds.has("tool_call") && kinds.has("llm.prompt"), JSON.stringify(page.events));
    assert.equal((await client.monitor.get(res.ids[0]!)).id, res.ids[0]);
    await assert.rejects(client.monitor.ingest({ events: [{ kind: "Not A Kind" }] }), ValidationError);
  });

  test("middleware: put, test, delete", async () => {
    const name = "ts-" + uid();
    const mw = await client.middleware.put(name, { kinds: ["exec"], disabled: true, max_memory_mb: 256, timeout_ms: 5000,
      script: "function pre(action) { if (action.kind == 'exec') return {block: 'no exec'}; }" });
    assert.equal(mw.source, "api");
    try {
      assert.ok((await client.middleware.list()).some((m) => m.name === name));
      const v = await client.middleware.test({ name, action: { kind: "exec" } });
      assert.equal(v.action, "block");
      assert.equal(v.message, "no exec");
    } finally {
      await client.middleware.delete(name);
    }
    await assert.rejects(client.middleware.get(name), NotFoundError);
  });

  test("llm budgets and usage", async () => {
    const before = await client.llm.budgets();
    if (before.source === "config" && before.budgets.length > 0) return; // the daemon's config owns them
    const name = "ts-" + uid();
    const got = await client.llm.setBudgets({ budgets: [{ name, principal: "*", period: "day", tokens: 1000 }] });
    try {
      assert.deepEqual(got.budgets.map((b) => b.name), [name]);
    } finally {
      await client.llm.resetBudgets();
    }
    assert.ok(Array.isArray((await client.usage({ groupBy: "principal" })).rows));
  });

  test("approvals: held, approved and retried, rejected", async () => {
    const p = await client.principals.create("ts-appr-" + uid());
    const key = await client.keys.create({ scopes: ["sandboxes:create", "sandboxes:read", "sandboxes:delete", "sandboxes:exec"],
      principal_id: p.id });
    const polId = "ts-appr-" + uid();
    await client.policies.create({ id: polId, name: "hold exec", scope: { kind: "principal", id: p.id },
      rules: [{ id: "hold", kinds: ["exec"], outcome: "require_approval", message: "needs a human" }] });
    const agent = new Warden({ apiKey: key.key });
    try {
      await using sb = await agent.sandboxes.create({ timeoutSeconds: 120 });
      let aid = "";
      await assert.rejects(sb.exec("echo approved"), (e: unknown) => {
        if (!(e instanceof ApprovalRequiredError) || !(e instanceof APIError)) return false;
        aid = e.approvalId;
        return true;
      });
      assert.equal((await client.approvals.get(aid)).state, "pending");
      assert.equal((await client.approvals.approve(aid, "fine")).state, "approved");
      assert.equal((await sb.exec("echo approved")).stdout, "approved\n");
      let other = "";
      await assert.rejects(sb.exec("echo other"), (e: unknown) => { other = (e as ApprovalRequiredError).approvalId; return true; });
      assert.equal((await client.approvals.reject(other, "no")).state, "rejected");
      await assert.rejects(sb.exec("echo other"), ForbiddenError);
    } finally {
      await client.policies.delete(polId);
      await client.keys.revoke(key.api_key.id);
    }
  });
});

describe("unix socket", () => {
  const sock = process.env.WARDEN_SOCKET;
  test("the default socket is used when it is there", () => {
    if (!sock) throw new Error("WARDEN_SOCKET (the daemon's unix socket) is not set; go test ./test/sdk sets it");
    assert.equal(defaultSocket(sock), sock);
    assert.equal(defaultSocket(sock + ".missing"), undefined);
    // without $WARDEN_URL and without the default socket: TCP on localhost
    const saved = process.env.WARDEN_URL;
    delete process.env.WARDEN_URL;
    try {
      const c = new Warden();
      assert.equal(c.baseUrl, defaultSocket() ? "http://wardend" : "http://127.0.0.1:7070");
    } finally {
      process.env.WARDEN_URL = saved;
    }
  });
  test("calls, streams, errors and the pty over unix://", async () => {
    if (!sock) throw new Error("WARDEN_SOCKET is not set");
    const c = new Warden({ baseUrl: "unix://" + sock });
    assert.equal(c.baseUrl, "http://wardend");
    assert.equal((await c.health()).status, "ok");
    await assert.rejects(c.sandboxes.get("sb-doesnotexist"), NotFoundError);
    await using s = await c.sandboxes.create({ timeoutSeconds: 120 });
    let out = "";
    const r = await s.exec("for i in 1 2 3; do echo $i; done", { onStdout: (t) => { out += t; } });
    assert.equal(r.stdout, "1\n2\n3\n");
    assert.equal(out, "1\n2\n3\n");
    const data = new Uint8Array(3 << 20);
    for (let i = 0; i < data.length; i++) data[i] = i * 7 & 0xff;
    await s.files.write("/tmp/big.bin", data); // content-length
    async function* pieces() { for (let i = 0; i < data.length; i += 1 << 20) yield data.subarray(i, i + (1 << 20)); }
    await s.files.write("/tmp/streamed.bin", pieces()); // chunked
    for (const p of ["/tmp/big.bin", "/tmp/streamed.bin"]) assert.deepEqual(await s.files.readBytes(p), data);
    const t = await s.pty({ cmd: "/bin/sh" });
    t.write("echo pty-$((6*7)); exit 3\n");
    let term = "";
    const code = await t.wait((b) => { term += new TextDecoder().decode(b); });
    t.close();
    assert.ok(term.includes("pty-42"), term);
    assert.equal(code, 3);
  });
});
