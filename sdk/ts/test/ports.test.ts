// Ports: the proxy with the key, publishing, preview URLs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Warden } from "../src/index.js";

const client = new Warden();

async function get(url: string, key?: string): Promise<[number, string]> {
  const r = await fetch(url, { headers: key ? { authorization: `Bearer ${key}` } : {} });
  return [r.status, await r.text()];
}

test("ports", async () => {
  await using sb = await client.sandboxes.create({ timeoutSeconds: 120 });
  await sb.files.write("/tmp/site/index.html", "served from the sandbox");
  const srv = await sb.start(["python3", "-m", "http.server", "8124", "--directory", "/tmp/site"], { tag: "web" });
  const key = client.transport.apiKey;
  let got: [number, string] = [0, ""];
  for (let i = 0; i < 50; i++) {
    got = await get(sb.proxyUrl(8124, "index.html"), key);
    if (got[0] === 200) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.deepEqual(got, [200, "served from the sandbox"]);
  assert.ok([401, 403].includes((await get(sb.proxyUrl(8124, "index.html")))[0]));
  const pub = await sb.publishPort(8124);
  assert.equal(pub.public, true);
  assert.equal((await get(pub.url + "index.html"))[0], 200);
  await sb.unpublishPort(8124);
  assert.ok([401, 403].includes((await get(pub.url + "index.html"))[0]));
  const prev = await sb.previewUrl(8124, { expiresSeconds: 60 });
  assert.equal((await get(prev.url))[0], 200);
  srv.disconnect();
});
