import { describe, test, before, after } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import {
  Warden, Sandbox, COVERED, OPERATIONS, ERROR_STATUS, ERROR_CLASSES, NotFoundError, ConflictError, AuthError,
  ForbiddenError, ValidationError, APIError,
} from "../src/index.js";
import { tar, uid } from "./helpers.js";

const client = new Warden();
let sb: Sandbox;

before(async () => {
  sb = await client.sandboxes.create({ metadata: { suite: "ts-sdk" }, timeoutSeconds: 600 });
});
after(async () => {
  await sb?.kill().catch(() => {});
});

describe("spec coverage", () => {
  test("every operation has a method", () => {
    const missing = Object.keys(OPERATIONS).filter((id) => !COVERED.has(id));
    assert.deepEqual(missing, [], `operations without a method in sdk/ts: ${missing}`);
    const unknown = [...COVERED].filter((id) => !(id in OPERATIONS));
    assert.deepEqual(unknown, []);
  });
  test("every error code has a class", () => {
    for (const code of Object.keys(ERROR_STATUS)) assert.ok(code in ERROR_CLASSES, code);
  });
});

describe("sandboxes", () => {
  test("lifecycle with await using", async () => {
    const name = "ts-" + uid();
    let id = "";
    {
      await using s = await client.sandboxes.create({ name, metadata: { case: name }, env: { GREETING: "hello" }, timeoutSeconds: 300 });
      id = s.id;
      assert.match(s.id, /^sb-/);
      assert.equal(s.state, "running");
      assert.equal((await s.exec("echo $GREETING")).stdout, "hello\n");
      assert.equal((await client.sandboxes.get(name)).id, s.id);
      const ids: string[] = [];
      for await (const x of client.sandboxes.list({ metadata: { case: name } })) ids.push(x.id);
      assert.deepEqual(ids, [s.id]);
      assert.ok((await s.setTimeout(600)).expires_at);
      assert.equal((await s.pause()).state, "paused");
      assert.equal((await s.resume()).state, "running");
      assert.ok("memory_bytes" in (await s.usage()));
      await assert.rejects(s.fork({ count: 1 }), ConflictError); // native cannot fork
      const st = await s.setNetwork("allowlist", ["example.com"]);
      assert.equal(st.policy.mode, "allowlist");
      assert.equal((await s.network()).policy.allow?.[0]?.host, "example.com");
    }
    const info = await client.sandboxes.info(id);
    assert.ok(["stopping", "stopped"].includes(info.state), info.state);
    await assert.rejects((await client.sandboxes.get(id)).exec("true"), ConflictError);
  });

  test("logs", async () => {
    const p = await sb.start("echo logged-line");
    await p.wait();
    let found = false;
    for await (const ev of sb.logs({ pid: p.pid })) {
      if (ev.stream === "stdout" && atob(ev.data ?? "").includes("logged-line")) found = true;
    }
    assert.ok(found);
  });
});

describe("processes", () => {
  test("exec with callbacks", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const r = await sb.exec("for i in 1 2 3; do echo out$i; echo err$i >&2; done; exit 7", { onStdout: (s) => out.push(s), onStderr: (s) => err.push(s) });
    assert.equal(r.exitCode, 7);
    assert.equal(r.ok, false);
    assert.equal(out.join(""), "out1\nout2\nout3\n");
    assert.equal(r.stderr, "err1\nerr2\nerr3\n");
  });
  test("argv, env, cwd, user, stdin, timeout", async () => {
    assert.equal((await sb.exec(["sh", "-c", "echo $A $(pwd)"], { env: { A: "x y" }, cwd: "/tmp" })).stdout, "x y /tmp\n");
    assert.equal((await sb.exec(["id", "-un"], { user: "root" })).stdout.trim(), "root");
    assert.equal((await sb.exec("wc -l", { input: "line\n".repeat(10000) })).stdout.trim(), "10000");
    assert.equal((await sb.exec("sleep 30", { timeoutSeconds: 1 })).ok, false);
  });
  test("async iterator", async () => {
    const p = await sb.start(["sh", "-c", "echo a; sleep 0.2; echo b >&2"]);
    assert.ok(p.pid > 0);
    const pieces: string[] = [];
    for await (const o of p) pieces.push(`${o.stream}:${o.text}`);
    assert.ok(pieces.includes("stdout:a\n") && pieces.includes("stderr:b\n"), String(pieces));
    assert.equal(p.result?.exitCode, 0);
  });
  test("background process reattached from a second client", async () => {
    const p = await sb.start(["sh", "-c", "while read l; do echo got:$l; done; echo bye"], { stdin: true, tag: "bg" });
    const pid = p.pid;
    await p.sendStdin("one\n");
    const it = p[Symbol.asyncIterator]();
    const first = await it.next();
    assert.equal(first.value?.text, "got:one\n");
    p.disconnect();

    const other = new Warden();
    const sb2 = await other.sandboxes.get(sb.id);
    const info = (await sb2.processes()).find((x) => x.pid === pid);
    assert.ok(info && !info.exited && info.tag === "bg");
    const again = await sb2.attach(pid);
    await sb2.sendStdin(pid, "two\n");
    await sb2.closeStdin(pid);
    const res = await again.wait();
    assert.ok(res.stdout.includes("got:two\n") && res.stdout.endsWith("bye\n"), res.stdout);
    assert.equal(res.exitCode, 0);
  });
  test("signal", async () => {
    const p = await sb.start("sleep 60");
    await p.signal("SIGTERM");
    const res = await p.wait();
    assert.ok(res.signal === 15 || res.exitCode !== 0);
  });
  test("pty", async () => {
    const t = await sb.pty({ cmd: "/bin/sh", cols: 100, rows: 30 });
    t.resize(120, 40);
    t.write("stty size; echo pty-$((6*7)); exit 3\n");
    let out = "";
    const code = await t.wait((b) => { out += new TextDecoder().decode(b); });
    t.close();
    assert.ok(out.includes("pty-42"), out);
    assert.ok(out.includes("40 120"), out);
    assert.equal(code, 3);
  });
});

describe("files", () => {
  test("text, bytes, ranges, iterables", async () => {
    const e = await sb.files.write("/tmp/ts/a.txt", "héllo\n", { mode: 0o600 });
    assert.ok(e.mode.endsWith("600"));
    assert.equal(await sb.files.readText("/tmp/ts/a.txt"), "héllo\n");
    const blob = new Uint8Array(2560).map((_, i) => i & 255);
    await sb.files.write("/tmp/ts/b.bin", blob);
    assert.deepEqual(await sb.files.readBytes("/tmp/ts/b.bin"), blob);
    const part = new Uint8Array(await (await sb.files.open("/tmp/ts/b.bin", { offset: 10, length: 5 })).arrayBuffer());
    assert.deepEqual(part, blob.subarray(10, 15));
    async function* gen() { for (const s of ["x", "y", "z"]) yield new TextEncoder().encode(s); }
    await sb.files.write("/tmp/ts/it.txt", gen());
    assert.equal(await sb.files.read("/tmp/ts/it.txt"), "xyz");
  });
  test("list, stat, mkdir, move, remove", async () => {
    assert.equal((await sb.files.mkdir("/tmp/tstree/sub")).type, "dir");
    await sb.files.write("/tmp/tstree/two", "22");
    assert.deepEqual((await sb.files.list("/tmp/tstree")).map((e) => e.name).sort(), ["sub", "two"]);
    assert.equal((await sb.files.stat("/tmp/tstree/two")).size, 2);
    await sb.files.move("/tmp/tstree/two", "/tmp/tstree/three");
    assert.equal(await sb.files.exists("/tmp/tstree/two"), false);
    await sb.files.remove("/tmp/tstree/three");
    await assert.rejects(sb.files.stat("/tmp/tstree/three"), NotFoundError);
  });
  test("watch", async () => {
    await sb.files.mkdir("/tmp/tswatch");
    const w = await sb.files.watch("/tmp/tswatch");
    const writing = sb.files.write("/tmp/tswatch/new.txt", "x");
    let seen = false;
    for await (const ev of w) {
      if (ev.name === "new.txt") { seen = true; break; }
    }
    w.close();
    await writing;
    assert.ok(seen);
  });
  test("presigned URLs", async () => {
    const up = await sb.files.uploadUrl("/tmp/ts-presigned.txt", { expiresSeconds: 60 });
    assert.ok(up.includes("sig="));
    assert.equal((await client.writePresigned(up, "via url")).size, 7);
    const down = await sb.files.downloadUrl("/tmp/ts-presigned.txt");
    assert.equal(await (await client.readPresigned(down)).text(), "via url");
    assert.equal(await (await fetch(down)).text(), "via url");
  });
  test("archives", async () => {
    await sb.files.uploadArchive("/tmp/tsarch", tar({ "dir/f.txt": "in the archive" }));
    assert.equal(await sb.files.read("/tmp/tsarch/dir/f.txt"), "in the archive");
    const got = new Uint8Array(await (await sb.files.downloadArchive("/tmp/tsarch")).arrayBuffer());
    assert.ok(new TextDecoder().decode(got).includes("dir/f.txt"));
  });
  test("100 MiB streamed up and down without holding it in memory", async () => {
    const MiB = 1 << 20;
    const chunk = new Uint8Array(MiB).map((_, i) => i & 255);
    let peak = 0;
    const sample = () => { peak = Math.max(peak, process.memoryUsage().rss); };
    const timer = setInterval(sample, 10);
    const base = process.memoryUsage().rss;
    try {
      async function* gen() { for (let i = 0; i < 100; i++) { sample(); yield chunk; } }
      const e = await sb.files.write("/tmp/big-ts.bin", gen());
      assert.equal(e.size, 100 * MiB);
      const dest = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "warden-ts-")), "big.bin");
      const n = await sb.files.download("/tmp/big-ts.bin", dest);
      assert.equal(n, 100 * MiB);
      assert.equal(fs.statSync(dest).size, 100 * MiB);
      const fd = fs.openSync(dest, "r");
      const buf = new Uint8Array(MiB);
      for (const off of [0, 50 * MiB, 99 * MiB]) {
        fs.readSync(fd, buf, 0, MiB, off);
        assert.deepEqual(buf, chunk);
      }
      fs.closeSync(fd);
      fs.rmSync(path.dirname(dest), { recursive: true });
    } finally {
      clearInterval(timer);
    }
    sample();
    const grew = (peak - base) / MiB;
    console.log(`peak RSS: ${(base / MiB).toFixed(1)} MiB before, ${(peak / MiB).toFixed(1)} MiB peak while moving 100 MiB each way (+${grew.toFixed(1)} MiB)`);
    assert.ok(grew < 60, `RSS grew by ${grew.toFixed(1)} MiB moving 100 MiB`);
  });
});

describe("code interpreter", () => {
  test("run, state, errors, contexts", async () => {
    const out: string[] = [];
    const ex = await sb.runCode("x = 21\nprint('side')\nx * 2", { onStdout: (s) => out.push(s) });
    assert.equal(ex.text, "42");
    assert.equal(out.join(""), "side\n");
    assert.equal((await sb.runCode("x + 1")).text, "22");
    assert.equal((await sb.runCode("1/0")).error?.name, "ZeroDivisionError");
    const ctx = await sb.createCodeContext({ language: "python" });
    assert.ok((await sb.codeContexts()).some((c) => c.id === ctx.id));
    await sb.runCode("y = 5", { contextId: ctx.id });
    assert.equal((await sb.runCode("y * 2", { contextId: ctx.id })).text, "10");
    await sb.restartCodeContext(ctx.id);
    await sb.interruptCodeContext(ctx.id);
    await sb.deleteCodeContext(ctx.id);
  });
  test("chart as bytes", async () => {
    const ex = await sb.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()");
    if (ex.error?.name === "ModuleNotFoundError") {
      console.log("SKIP: the sandbox's python has no matplotlib");
      return;
    }
    const png = ex.results.map((r) => r.bytes("png")).find((b) => b);
    assert.ok(png && png[0] === 0x89 && new TextDecoder().decode(png.subarray(1, 4)) === "PNG");
  });
});

describe("templates", () => {
  test("build with streamed logs", async () => {
    const name = "ts-sdk-" + uid();
    const ctx = tar({
      Dockerfile: "FROM base\nUSER root\nCOPY hello.txt /opt/hello.txt\nRUN echo built-$((40+2)) && cat /opt/hello.txt > /opt/copy.txt\n",
      "hello.txt": `hello from ${name}\n`,
    });
    const logs: string[] = [];
    const res = await client.templates.build(name, ctx, { onLog: (l) => logs.push(l) });
    assert.ok(logs.some((l) => l.includes("built-42")), String(logs));
    assert.ok(res.id);
    try {
      await using s = await client.sandboxes.create({ template: name, timeoutSeconds: 120 });
      assert.equal(await s.files.read("/opt/copy.txt"), `hello from ${name}\n`);
    } finally {
      await client.templates.delete(name);
    }
    assert.ok((await client.templates.list()).some((t) => t.name.startsWith("base")));
    assert.ok("bytes" in (await client.templates.usage()));
  });
});

describe("identity and errors", () => {
  test("principals and keys", async () => {
    assert.ok((await client.whoami()).key.scopes.includes("admin"));
    const agent = await client.principals.create("ts-agent-" + uid(), "agent");
    assert.ok((await client.principals.list()).some((p) => p.id === agent.id));
    const created = await client.keys.create({ scopes: ["sandboxes:read"], principal_id: agent.id, name: "reader" });
    assert.ok((await client.keys.list()).some((k) => k.id === created.api_key.id));
    const reader = new Warden({ apiKey: created.key });
    assert.equal((await reader.whoami()).principal.id, agent.id);
    await assert.rejects(reader.sandboxes.create(), (e: unknown) => e instanceof ForbiddenError && e.status === 403 && e.requestId !== "");
    await client.keys.revoke(created.api_key.id);
    await assert.rejects(reader.whoami(), AuthError);
  });
  test("errors map to classes", async () => {
    await assert.rejects(client.sandboxes.get("sb-doesnotexist"), (e: unknown) => e instanceof NotFoundError && e instanceof APIError && e.code === "not_found");
    await assert.rejects(new Warden({ apiKey: "wdn_bogus" }).whoami(), AuthError);
    await assert.rejects(client.principals.create("x", "robot" as "agent"), ValidationError);
  });
  test("health, metrics, openapi", async () => {
    assert.equal((await client.health()).status, "ok");
    assert.ok((await client.openapi()).includes("openapi:"));
    assert.ok((await client.metrics()).includes("# "));
  });
});

describe("secrets, governance, audit, mcp", () => {
  test("secrets", async () => {
    const s = await client.secrets.put("ts_sdk_" + uid(), "s3cr3t-value-123");
    const g = await client.secrets.grant(s.id, { hosts: ["api.example.com"], sandbox: sb.id, header: "Authorization" });
    assert.ok((await client.secrets.grants(s.id)).some((x) => x.id === g.id));
    await client.secrets.revokeGrant(g.id!);
    await client.secrets.revoke(s.id);
    await client.secrets.delete(s.id);
    assert.ok(!(await client.secrets.list()).some((x) => x.id === s.id));
  });
  test("policies, approvals, guard", async () => {
    const id = "ts-" + uid();
    const pol = { id, name: "ts sdk", scope: { kind: "installation" as const },
      rules: [{ id: "r", kinds: ["exec"], when: "false", outcome: "deny" as const, message: "no" }] };
    assert.equal((await client.policies.create(pol)).version, 1);
    assert.equal((await client.policies.update(id, { ...pol, name: "v2" })).version, 2);
    assert.equal((await client.policies.get(id, { version: 1 })).name, "ts sdk");
    assert.equal((await client.policies.test({ policy: pol, limit: 50 })).policy_id, id);
    await client.policies.delete(id);
    await assert.rejects(client.policies.get(id), NotFoundError);
    assert.ok(Array.isArray(await client.approvals.list({ state: "pending" })));
    await assert.rejects(client.approvals.get("apr_missing"), NotFoundError);
    assert.ok(Array.isArray((await client.policies.testGuard({ text: "key AKIAIOSFODNN7EXAMPLE" })).findings));
    const rows = [{ text: "my key AKIAIOSFODNN7EXAMPLE", label: "secret" }, { text: "hello there", label: "none" }];
    const report = await client.policies.evalGuard(rows.map((r) => JSON.stringify(r) + "\n").join(""));
    assert.equal(report.rows, 2);
  });
  test("audit", async () => {
    let n = 0;
    for await (const ev of client.audit.events()) { assert.ok(ev.seq >= 1); if (++n > 5) break; }
    assert.ok(n > 0);
    assert.equal((await client.audit.verify()).ok, true);
  });
  test("mcp admin", async () => {
    const cid = "ts-" + uid();
    assert.equal((await client.mcp.createConnector({ id: cid, kind: "builtin", description: "ts", spec: {} })).id, cid);
    assert.ok((await client.mcp.connectors()).some((c) => c.id === cid));
    const sid = "ts-srv-" + uid();
    await client.mcp.createServer({ id: sid, spec: { connectors: [{ connector: cid }] } });
    const me = (await client.whoami()).principal.id;
    await client.mcp.grant(sid, me);
    assert.ok((await client.mcp.grants(sid)).some((g) => g.principal_id === me));
    await client.mcp.revoke(sid, me);
    await client.mcp.deleteServer(sid);
    await client.mcp.deleteConnector(cid);
    await assert.rejects(client.mcp.getConnector(cid), NotFoundError);
  });
});
