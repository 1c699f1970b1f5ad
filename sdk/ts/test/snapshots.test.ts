// Filesystem snapshots: take one, list and get it, start a sandbox from it, promote it to a
// template, delete it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Warden, NotFoundError } from "../src/index.js";
import { uid } from "./helpers.js";

const client = new Warden();

test("snapshots", async () => {
  await using sb = await client.sandboxes.create({ timeoutSeconds: 300 });
  await sb.files.write("/home/user/snap.txt", "kept in the snapshot");
  const name = "ts-snap-" + uid();
  const snap = await sb.snapshot(name);
  assert.equal(snap.name, name);
  assert.equal(snap.sandbox_id, sb.id);
  const tpl = "ts-snap-tpl-" + uid();
  try {
    assert.ok((await client.snapshots.list({ sandbox: sb.id })).some((s) => s.name === name));
    assert.equal((await client.snapshots.get(name)).id, snap.id);
    {
      await using from = await client.sandboxes.create({ snapshot: name, timeoutSeconds: 120 });
      assert.equal(await from.files.readText("/home/user/snap.txt"), "kept in the snapshot");
    }
    const t = await client.snapshots.promote(name, tpl);
    assert.ok([tpl, tpl + ":latest"].includes(t.name), t.name);
    await client.templates.delete(t.name);
  } finally {
    await client.snapshots.delete(name);
  }
  await assert.rejects(client.snapshots.get(name), NotFoundError);
});
