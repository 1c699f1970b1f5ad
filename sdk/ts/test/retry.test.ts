// Retries on 429/503 for idempotent calls only, Retry-After, and error decoding, against a
// local fake server (no daemon needed).
import { describe, test, before, after } from "node:test";
import assert from "node:assert/strict";
import * as http from "node:http";
import { Warden, RateLimitedError, UnavailableError, NotFoundError, BadGatewayError, ApprovalRequiredError, ConnectionError } from "../src/index.js";

type Step = [number, Record<string, string>, string];
let script: Step[] = [];
let seen: string[] = [];
let url = "";
let server: { close(): void; address(): { port: number }; listen(p: number, h: string, cb: () => void): void };

const err = (code: string, status: number, headers: Record<string, string> = {}): Step =>
  [status, { "content-type": "application/json", ...headers }, JSON.stringify({ error: { code, message: `${code} here`, request_id: "req-1" } })];

before(async () => {
  server = http.createServer((req: { method: string; url: string; resume(): void }, res: { writeHead(s: number, h: Record<string, string>): void; end(b: string): void }) => {
    req.resume();
    seen.push(`${req.method} ${req.url}`);
    const [s, h, b] = script.shift() ?? [200, {}, "{}"];
    res.writeHead(s, h);
    res.end(b);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${server.address().port}`;
});
after(() => server.close());

const mk = () => new Warden({ baseUrl: url, apiKey: "k", retry: { minDelayMs: 5, maxDelayMs: 10 } });

describe("retries", () => {
  test("idempotent call retried on 429 and 503", async () => {
    script = [err("rate_limited", 429, { "retry-after": "0" }), err("unavailable", 503), [200, {}, '{"status":"ok","version":"x"}']];
    seen = [];
    assert.equal((await mk().health()).status, "ok");
    assert.deepEqual(seen, ["GET /healthz", "GET /healthz", "GET /healthz"]);
  });
  test("non-idempotent call not retried", async () => {
    script = [err("rate_limited", 429, { "retry-after": "1" })];
    seen = [];
    await assert.rejects(mk().sandboxes.create(), (e: unknown) => e instanceof RateLimitedError && e.retryAfter === 1 && e.requestId === "req-1");
    assert.deepEqual(seen, ["POST /v1/sandboxes"]);
  });
  test("retries exhausted, long Retry-After not waited", async () => {
    script = [err("unavailable", 503), err("unavailable", 503), err("unavailable", 503), err("unavailable", 503)];
    seen = [];
    await assert.rejects(mk().health(), UnavailableError);
    assert.equal(seen.length, 4);
    script = [err("rate_limited", 429, { "retry-after": "3600" })];
    seen = [];
    await assert.rejects(mk().health(), RateLimitedError);
    assert.equal(seen.length, 1);
  });
  test("error classes and non-Warden bodies", async () => {
    script = [err("not_found", 404)];
    await assert.rejects(mk().whoami(), NotFoundError);
    script = [[403, { "content-type": "application/json" }, JSON.stringify({ error: { code: "approval_required", message: "held", request_id: "r", approval_id: "apr_1" } })]];
    await assert.rejects(mk().whoami(), (e: unknown) => e instanceof ApprovalRequiredError && e.approvalId === "apr_1");
    script = [[502, {}, "upstream broke"]];
    await assert.rejects(mk().whoami(), (e: unknown) => e instanceof BadGatewayError && e.code === "" && e.detail === "upstream broke");
  });
  test("connection refused", async () => {
    await assert.rejects(new Warden({ baseUrl: "http://127.0.0.1:1", retry: { maxAttempts: 2, minDelayMs: 5 } }).health(), ConnectionError);
  });
});
