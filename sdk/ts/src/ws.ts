// A minimal RFC 6455 WebSocket client over node:http's upgrade, for the PTY: it sends the API
// key as a header, which a browser's WebSocket cannot. Node only (loaded on first use).

import { ConnectionError, StreamError, errorFromResponse } from "./errors.js";

export const OP_TEXT = 1;
export const OP_BINARY = 2;
export const OP_CLOSE = 8;
const OP_PING = 9;
const OP_PONG = 10;

// Node's modules, loaded at run time so that the package stays importable in browsers.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;
const load = (name: string): Promise<Any> => import(name);

export interface WSMessage {
  op: number;
  data: Uint8Array;
}

export class WebSocketConn {
  private buf: Uint8Array = new Uint8Array(0);
  private waiters: Array<() => void> = [];
  private ended = false;
  private error: Error | undefined;
  closed = false;

  private constructor(private sock: Any, private crypto: Any, head: Uint8Array) {
    this.buf = head;
    sock.on("data", (d: Uint8Array) => {
      this.buf = concat(this.buf, d);
      this.wake();
    });
    sock.on("end", () => { this.ended = true; this.wake(); });
    sock.on("close", () => { this.ended = true; this.wake(); });
    sock.on("error", (e: Error) => { this.error = e; this.wake(); });
  }

  private wake() {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  static async connect(url: string, headers: Record<string, string>, timeoutMs: number, socketPath?: string): Promise<WebSocketConn> {
    const u = new URL(url);
    const http = await load(u.protocol === "https:" ? "node:https" : "node:http");
    const crypto = await load("node:crypto");
    const key = crypto.randomBytes(16).toString("base64");
    return await new Promise<WebSocketConn>((resolve, reject) => {
      const req = http.request(u, {
        method: "GET",
        headers: { ...headers, connection: "Upgrade", upgrade: "websocket", "sec-websocket-version": "13", "sec-websocket-key": key },
        timeout: timeoutMs,
        ...(socketPath ? { socketPath } : {}),
      });
      req.on("timeout", () => req.destroy(new ConnectionError(`websocket handshake: timed out after ${timeoutMs} ms`)));
      req.on("error", (e: Error) => reject(e instanceof ConnectionError ? e : new ConnectionError(`connect websocket: ${e.message}`, { cause: e })));
      req.on("response", (res: Any) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => { if (text.length < 65536) text += c; });
        res.on("end", () => {
          const h = new Headers();
          for (const [k, v] of Object.entries(res.headers as Record<string, string>)) if (typeof v === "string") h.set(k, v);
          reject(errorFromResponse(res.statusCode, h, text));
        });
      });
      req.on("upgrade", (res: Any, sock: Any, head: Uint8Array) => {
        const want = crypto.createHash("sha1").update(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest("base64");
        if (res.headers["sec-websocket-accept"] !== want) {
          sock.destroy();
          reject(new ConnectionError("websocket handshake: bad Sec-WebSocket-Accept"));
          return;
        }
        sock.setTimeout(0);
        resolve(new WebSocketConn(sock, crypto, new Uint8Array(head)));
      });
      req.end();
    });
  }

  send(op: number, data: Uint8Array): void {
    const n = data.length;
    const head: number[] = [0x80 | op];
    if (n < 126) head.push(0x80 | n);
    else if (n < 65536) head.push(0x80 | 126, n >> 8, n & 255);
    else {
      head.push(0x80 | 127, 0, 0, 0, 0);
      head.push((n / 2 ** 24) & 255, (n >> 16) & 255, (n >> 8) & 255, n & 255);
    }
    const mask = new Uint8Array(this.crypto.randomBytes(4));
    const out = new Uint8Array(head.length + 4 + n);
    out.set(head, 0);
    out.set(mask, head.length);
    for (let i = 0; i < n; i++) out[head.length + 4 + i] = data[i] ^ mask[i & 3];
    this.sock.write(out);
  }

  private async read(n: number): Promise<Uint8Array> {
    while (this.buf.length < n) {
      if (this.error) throw new ConnectionError(`websocket read: ${this.error.message}`, { cause: this.error });
      if (this.ended) throw new ConnectionError("websocket closed without a close frame");
      await new Promise<void>((r) => this.waiters.push(r));
    }
    const out = this.buf.slice(0, n);
    this.buf = this.buf.slice(n);
    return out;
  }

  /** The next whole data message, answering pings; op OP_CLOSE at the end. */
  async recv(): Promise<WSMessage> {
    let msgOp = 0;
    const parts: Uint8Array[] = [];
    for (;;) {
      const [b0, b1] = await this.read(2);
      const op = b0 & 15;
      let n = b1 & 127;
      if (n === 126) {
        const x = await this.read(2);
        n = (x[0] << 8) | x[1];
      } else if (n === 127) {
        const x = await this.read(8);
        n = 0;
        for (const b of x) n = n * 256 + b;
      }
      if (n > 16 << 20) throw new StreamError("websocket frame too large");
      const mask = b1 & 128 ? await this.read(4) : undefined;
      const data = await this.read(n);
      if (mask) for (let i = 0; i < n; i++) data[i] ^= mask[i & 3];
      if (op === OP_PING) { this.send(OP_PONG, data); continue; }
      if (op === OP_PONG) continue;
      if (op === OP_CLOSE) {
        if (!this.closed) {
          this.closed = true;
          try { this.send(OP_CLOSE, data.slice(0, 2)); } catch { /* gone */ }
        }
        return { op: OP_CLOSE, data };
      }
      if (op !== 0) msgOp = op;
      parts.push(data);
      if (b0 & 128) return { op: msgOp || OP_BINARY, data: parts.length === 1 ? parts[0] : concat(...parts) };
    }
  }

  close(): void {
    if (!this.closed) {
      this.closed = true;
      try { this.send(OP_CLOSE, new Uint8Array([3, 232])); } catch { /* gone */ }
    }
    this.sock.end();
    (setTimeout(() => this.sock.destroy(), 1000) as unknown as { unref?: () => void }).unref?.();
  }
}

function concat(...arrs: Uint8Array[]): Uint8Array {
  let n = 0;
  for (const a of arrs) n += a.length;
  const out = new Uint8Array(n);
  let o = 0;
  for (const a of arrs) { out.set(a, o); o += a.length; }
  return out;
}
