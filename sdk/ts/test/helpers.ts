// Shared helpers of the TypeScript SDK suite.

/** A minimal ustar writer: enough for a build context of small files. */
export function tar(files: Record<string, string>): Uint8Array {
  const enc = new TextEncoder();
  const blocks: Uint8Array[] = [];
  for (const [name, content] of Object.entries(files)) {
    const data = enc.encode(content);
    const h = new Uint8Array(512);
    const put = (s: string, off: number, len: number) => h.set(enc.encode(s).subarray(0, len), off);
    put(name, 0, 100);
    put("0000644\0", 100, 8);
    put("0000000\0", 108, 8);
    put("0000000\0", 116, 8);
    put(data.length.toString(8).padStart(11, "0") + "\0", 124, 12);
    put(Math.floor(Date.now() / 1000).toString(8).padStart(11, "0") + "\0", 136, 12);
    put("        ", 148, 8);
    put("0", 156, 1);
    put("ustar\0" + "00", 257, 8);
    let sum = 0;
    for (const b of h) sum += b;
    put(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8);
    blocks.push(h);
    const body = new Uint8Array(Math.ceil(data.length / 512) * 512);
    body.set(data);
    blocks.push(body);
  }
  blocks.push(new Uint8Array(1024));
  let n = 0;
  for (const b of blocks) n += b.length;
  const out = new Uint8Array(n);
  let o = 0;
  for (const b of blocks) { out.set(b, o); o += b.length; }
  return out;
}

export const uid = () => Math.random().toString(16).slice(2, 8);
