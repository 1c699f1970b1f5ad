// The fetch-based transport: base URL and key from options or the environment, retries of
// idempotent calls on 429/503, timeouts, NDJSON streams.

import { ConnectionError, StreamError, WardenError, errorFromResponse, APIError } from "./errors.js";

export const DEFAULT_URL = "http://127.0.0.1:7070";
/** The daemon's unix socket, used by default in Node when it is there (as the CLI does). */
export const DEFAULT_SOCKET = "/run/warden/wardend.sock";
/** The host name requests over a unix socket carry (and the base URL's host). */
export const UNIX_HOST = "wardend";
export const ENV_URL = "WARDEN_URL";
export const ENV_API_KEY = "WARDEN_API_KEY";
export const MAX_EVENT = 4 << 20;

/** Bounds the retries of one idempotent call on 429 and 503. */
export interface RetryPolicy {
  /** Tries, the first included; 1 disables retries. Default 4. */
  maxAttempts?: number;
  /** First backoff in ms, doubled each try. Default 250. */
  minDelayMs?: number;
  /** Backoff cap in ms. Default 5000. */
  maxDelayMs?: number;
  /** Longest Retry-After (ms) that is waited for; a longer one throws. Default 30000. */
  maxRetryAfterMs?: number;
}

export interface ClientOptions {
  /**
   * http(s)://host:port[/prefix], or unix:///path/to/wardend.sock (Node only). Default
   * $WARDEN_URL; else, in Node, the daemon's socket /run/warden/wardend.sock when it exists
   * and is writable; else http://127.0.0.1:7070.
   */
  baseUrl?: string;
  /** API key sent as a bearer token; default $WARDEN_API_KEY. */
  apiKey?: string;
  /** Ms to wait for a response's headers (streams then last as long as they run). Default 120000. */
  timeoutMs?: number;
  retry?: RetryPolicy;
  /** A fetch to use instead of the global one. */
  fetch?: typeof fetch;
}

export type Query = Record<string, string | number | boolean | readonly (string | number)[] | undefined | null>;

/** A request body: in memory (retryable) or streamed (sent once). */
export type Body = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> | Iterable<Uint8Array>;

export interface RequestOptions {
  query?: Query;
  json?: unknown;
  body?: Body;
  contentType?: string;
  headers?: Record<string, string>;
  idempotent?: boolean;
  accept?: string;
  /** Keep the body open past the timeout (streams). */
  stream?: boolean;
  signal?: AbortSignal;
  /** Send no Authorization header. */
  anonymous?: boolean;
  timeoutMs?: number;
}

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name] || undefined;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;

/** A Node built-in module, synchronously (Node 20.16+), or undefined (browsers, older Node). */
function nodeModule(name: string): Any {
  const p = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
  try {
    return p?.getBuiltinModule?.(name);
  } catch {
    return undefined;
  }
}

/** The default socket when this process may use it (Node only); undefined otherwise. */
export function defaultSocket(path = DEFAULT_SOCKET): string | undefined {
  const fs = nodeModule("node:fs");
  if (!fs) return undefined;
  try {
    fs.accessSync(path, fs.constants.W_OK);
    return path;
  } catch {
    return undefined;
  }
}

/**
 * A fetch over a unix socket (node:http with socketPath), returning a standard Response whose
 * body streams with backpressure. No runtime dependency: Node's own modules.
 */
export function unixFetch(socketPath: string): typeof fetch {
  const http = nodeModule("node:http");
  if (!http) throw new WardenError("unix sockets need Node 20.16+ (process.getBuiltinModule)");
  return (async (input: RequestInfo | URL, init: RequestInit = {}): Promise<Response> => {
    const url = new URL(String(input instanceof Request ? input.url : input));
    const headers: Record<string, string> = { host: UNIX_HOST };
    new Headers(init.headers).forEach((v, k) => { headers[k] = v; });
    let data: Uint8Array | undefined;
    let stream: ReadableStream<Uint8Array> | undefined;
    const b = init.body as unknown;
    if (typeof b === "string") data = new TextEncoder().encode(b);
    else if (b instanceof Uint8Array) data = b;
    else if (b instanceof ArrayBuffer) data = new Uint8Array(b);
    else if (typeof Blob !== "undefined" && b instanceof Blob) data = new Uint8Array(await b.arrayBuffer());
    else if (b instanceof ReadableStream) stream = b as ReadableStream<Uint8Array>;
    else if (b != null) throw new WardenError("unsupported request body for a unix socket");
    if (data) headers["content-length"] = String(data.length);
    const signal = init.signal ?? undefined;
    return await new Promise<Response>((resolve, reject) => {
      const req = http.request({ socketPath, method: init.method ?? "GET", path: url.pathname + url.search, headers });
      const onAbort = () => req.destroy(signal?.reason ?? new Error("aborted"));
      if (signal?.aborted) return reject(signal.reason);
      signal?.addEventListener("abort", onAbort, { once: true });
      let responded = false;
      req.on("error", (e: Error) => {
        signal?.removeEventListener("abort", onAbort);
        if (!responded) reject(new TypeError(`fetch failed: ${e.message}`, { cause: e }));
      });
      req.on("response", (res: Any) => {
        responded = true;
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers as Record<string, string | string[] | undefined>)) {
          if (Array.isArray(v)) for (const x of v) h.append(k, x);
          else if (v !== undefined) h.set(k, v);
        }
        const status: number = res.statusCode;
        const empty = status === 204 || status === 304 || init.method === "HEAD";
        const done = () => signal?.removeEventListener("abort", onAbort);
        const body = empty ? null : new ReadableStream<Uint8Array>({
          start(ctrl) {
            res.on("data", (c: Uint8Array) => {
              ctrl.enqueue(new Uint8Array(c.buffer, c.byteOffset, c.byteLength));
              if ((ctrl.desiredSize ?? 1) <= 0) res.pause();
            });
            res.on("end", () => { done(); ctrl.close(); });
            res.on("error", (e: Error) => { done(); ctrl.error(e); });
            res.on("aborted", () => { done(); ctrl.error(new Error("response aborted")); });
          },
          pull() { res.resume(); },
          cancel() { done(); res.destroy(); },
        }, { highWaterMark: 4 });
        if (empty) { done(); res.resume(); }
        resolve(new Response(body, { status, statusText: res.statusMessage, headers: h }));
      });
      if (data) { req.end(data); return; }
      if (!stream) { req.end(); return; }
      const reader = stream.getReader();
      (async () => {
        try {
          for (;;) {
            const r = await reader.read();
            if (r.done) break;
            if (!req.write(r.value)) await new Promise<void>((ok) => req.once("drain", ok));
          }
          req.end();
        } catch (e) {
          req.destroy(e as Error);
        }
      })();
    });
  }) as typeof fetch;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      reject(signal.reason);
    }, { once: true });
  });

function isInMemory(b: Body | undefined): boolean {
  return b === undefined || typeof b === "string" || b instanceof Uint8Array || b instanceof ArrayBuffer ||
    (typeof Blob !== "undefined" && b instanceof Blob);
}

function toStream(b: AsyncIterable<Uint8Array> | Iterable<Uint8Array>): ReadableStream<Uint8Array> {
  const it = Symbol.asyncIterator in b ? (b as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]() : (b as Iterable<Uint8Array>)[Symbol.iterator]();
  return new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      const r = await it.next();
      if (r.done) ctrl.close();
      else ctrl.enqueue(r.value);
    },
    async cancel() {
      await (it as AsyncIterator<Uint8Array>).return?.();
    },
  }, { highWaterMark: 0 });
}

export function buildQuery(q?: Query): string {
  if (!q) return "";
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined || v === null || v === false) continue;
    if (Array.isArray(v)) for (const x of v) p.append(k, String(x));
    else p.append(k, String(v));
  }
  const s = p.toString();
  return s ? "?" + s : "";
}

export const seg = (s: string | number) => encodeURIComponent(String(s));

export class Transport {
  readonly baseUrl: string;
  /** The unix socket requests go to (baseUrl is then http://wardend); undefined over TCP. */
  readonly socketPath: string | undefined;
  readonly apiKey: string;
  readonly timeoutMs: number;
  readonly retry: Required<RetryPolicy>;
  private readonly fetchFn: typeof fetch;
  private readonly netFetch: typeof fetch;

  constructor(opts: ClientOptions = {}) {
    let raw = opts.baseUrl ?? env(ENV_URL);
    if (raw === undefined) {
      const sock = defaultSocket();
      raw = sock ? "unix://" + sock : DEFAULT_URL;
    }
    let u: URL;
    try {
      u = new URL(raw);
    } catch (e) {
      throw new WardenError(`base url ${JSON.stringify(raw)}: ${(e as Error).message}`);
    }
    this.netFetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    if (u.protocol === "unix:") {
      const path = decodeURIComponent(u.pathname || u.host);
      if (!path) throw new WardenError(`base url ${JSON.stringify(raw)}: no socket path`);
      this.socketPath = path;
      this.baseUrl = `http://${UNIX_HOST}`;
      this.fetchFn = opts.fetch ?? unixFetch(path);
    } else if (u.protocol === "http:" || u.protocol === "https:") {
      this.baseUrl = (u.origin + u.pathname).replace(/\/+$/, "");
      this.fetchFn = this.netFetch;
    } else {
      throw new WardenError(`base url ${JSON.stringify(raw)}: scheme must be http, https or unix`);
    }
    this.apiKey = opts.apiKey ?? env(ENV_API_KEY) ?? "";
    this.timeoutMs = opts.timeoutMs ?? 120_000;
    this.retry = { maxAttempts: 4, minDelayMs: 250, maxDelayMs: 5000, maxRetryAfterMs: 30_000, ...opts.retry };
  }

  /** The fetch for a URL: the socket's for the daemon's own URLs, the network's otherwise. */
  private fetchFor(url: string): typeof fetch {
    if (this.socketPath === undefined || url.startsWith(this.baseUrl + "/")) return this.fetchFn;
    return this.netFetch;
  }

  url(path: string, query?: Query): string {
    return this.baseUrl + path + buildQuery(query);
  }

  headers(extra?: Record<string, string>, accept = "application/json", anonymous = false): Record<string, string> {
    const h: Record<string, string> = { accept, ...extra };
    if (this.apiKey && !anonymous) h.authorization = `Bearer ${this.apiKey}`;
    return h;
  }

  backoff(attempt: number): number {
    const d = Math.min(this.retry.minDelayMs * 2 ** (attempt - 1), this.retry.maxDelayMs);
    return d / 2 + Math.random() * (d / 2);
  }

  /** Performs one call and returns its response (status < 400), or throws. */
  async request(method: string, path: string, o: RequestOptions = {}): Promise<Response> {
    const headers = this.headers(o.headers, o.accept, o.anonymous);
    let body: BodyInit | undefined;
    const replayable = isInMemory(o.body);
    if (o.json !== undefined) {
      body = JSON.stringify(o.json);
      headers["content-type"] = "application/json";
    } else if (o.body !== undefined) {
      headers["content-type"] = o.contentType ?? "application/octet-stream";
      if (replayable) body = o.body as BodyInit;
      else if (typeof ReadableStream !== "undefined" && o.body instanceof ReadableStream) body = o.body;
      else body = toStream(o.body as AsyncIterable<Uint8Array>);
    }
    const url = path.startsWith("http://") || path.startsWith("https://") ? path : this.url(path, o.query);
    let first: APIError | undefined;
    for (let attempt = 1; ; attempt++) {
      const ctl = new AbortController();
      const onAbort = () => ctl.abort(o.signal?.reason);
      o.signal?.addEventListener("abort", onAbort, { once: true });
      const timeoutMs = o.timeoutMs ?? this.timeoutMs;
      let timedOut = false;
      const timer = timeoutMs > 0 ? setTimeout(() => { timedOut = true; ctl.abort(); }, timeoutMs) : undefined;
      let resp: Response;
      try {
        resp = await this.fetchFor(url)(url, {
          method, headers, body, signal: ctl.signal,
          ...(body !== undefined && !replayable ? { duplex: "half" } : {}),
        } as RequestInit);
      } catch (e) {
        clearTimeout(timer);
        o.signal?.removeEventListener("abort", onAbort);
        if (o.signal?.aborted) throw o.signal.reason ?? e;
        const refused = /ECONNREFUSED|ENOENT/.test(String((e as { cause?: unknown }).cause ?? e));
        if (refused && replayable && attempt < this.retry.maxAttempts) {
          await sleep(this.backoff(attempt), o.signal);
          continue;
        }
        if (first) throw first;
        if (timedOut) throw new ConnectionError(`${method} ${path}: timed out after ${timeoutMs} ms`, { cause: e });
        throw new ConnectionError(`${method} ${path}: ${(e as Error).message}`, { cause: e });
      }
      clearTimeout(timer); // the timeout bounds the wait for the response's headers
      o.signal?.removeEventListener("abort", onAbort);
      if (resp.status < 400) return resp;
      const txt = await resp.text().catch(() => "");
      const err = errorFromResponse(resp.status, resp.headers, txt.slice(0, 64 << 10));
      const retryable = resp.status === 429 || resp.status === 503;
      if (!o.idempotent || !replayable || attempt >= this.retry.maxAttempts || !retryable) {
        if (first && !retryable) throw first;
        throw err;
      }
      first ??= err;
      const ra = (err as { retryAfter?: number | null }).retryAfter;
      let wait = this.backoff(attempt);
      if (ra !== null && ra !== undefined) {
        if (ra * 1000 > this.retry.maxRetryAfterMs) throw err;
        wait = ra * 1000;
      }
      await sleep(wait, o.signal);
    }
  }

  /** Performs a call and returns its decoded JSON body (undefined when empty). */
  async call<T>(method: string, path: string, o: RequestOptions = {}): Promise<T> {
    const resp = await this.request(method, path, o);
    const text = await resp.text();
    if (!text) return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch (e) {
      throw new StreamError(`decode response: ${(e as Error).message}`);
    }
  }
}

/** Yields each NDJSON line of a response body as an object. */
export async function* ndjson<T = Record<string, unknown>>(resp: Response, maxLine = MAX_EVENT): AsyncGenerator<T> {
  if (!resp.body) return;
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      let r: ReadableStreamReadResult<Uint8Array>;
      try {
        r = await reader.read();
      } catch (e) {
        throw new ConnectionError(`read stream: ${(e as Error).message}`, { cause: e });
      }
      if (r.done) break;
      buf += dec.decode(r.value, { stream: true });
      let i: number;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 1);
        if (line) yield parseLine<T>(line);
      }
      if (buf.length > maxLine) throw new StreamError(`stream event over ${maxLine} bytes`);
    }
    buf += dec.decode();
    if (buf.trim()) yield parseLine<T>(buf.trim());
  } finally {
    await reader.cancel().catch(() => {});
  }
}

function parseLine<T>(line: string): T {
  try {
    return JSON.parse(line) as T;
  } catch (e) {
    throw new StreamError(`decode stream event: ${(e as Error).message}`);
  }
}

/** Yields a response body's chunks. */
export async function* chunks(resp: Response): AsyncGenerator<Uint8Array> {
  if (!resp.body) return;
  const reader = resp.body.getReader();
  try {
    for (;;) {
      const r = await reader.read();
      if (r.done) return;
      yield r.value;
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}
