// Volumes, hosted agents, middleware, the monitor, LLM prices and budgets, usage: the SDK's
// paths and shapes against the daemon.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Warden, NotFoundError } from "../src/index.js";
import { uid } from "./helpers.js";

const client = new Warden();

test("volumes", async () => {
  const name = "ts-" + uid();
  assert.equal((await client.volumes.create({ name, size_mb: 16 })).name, name);
  try {
    assert.ok((await client.volumes.list()).some((v) => v.name === name));
    assert.equal((await client.volumes.get(name)).name, name);
    assert.equal((await client.volumes.write(name, "dir/a.txt", "on the volume")).size, 13);
    assert.equal(await (await client.volumes.open(name, "dir/a.txt")).text(), "on the volume");
    await client.volumes.resize(name, { size_mb: 32 });
  } finally {
    await client.volumes.delete(name);
  }
  await assert.rejects(client.volumes.get(name), NotFoundError);
});

test("listings", async () => {
  assert.ok(Array.isArray(await client.agents.list()));
  await assert.rejects(client.agents.get("ts-no-such-agent"), NotFoundError);
  assert.ok(Array.isArray(await client.middleware.list()));
  assert.ok("events" in (await client.monitor.events({ limit: 2 })));
  assert.ok("prices" in (await client.llm.prices()));
  assert.ok("budgets" in (await client.llm.budgets()));
  assert.ok("rows" in (await client.usage()));
});
