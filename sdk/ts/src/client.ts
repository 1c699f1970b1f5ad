// The Warden client: sandboxes, processes, files, PTY, code, templates, secrets, identity,
// audit, governance and MCP administration.

import type * as T from "./types.js";
import { ConflictError, NotFoundError, StreamError, WardenError, errorFromEvent } from "./errors.js";
import { Body, ClientOptions, Query, Transport, chunks, ndjson, seg } from "./http.js";
import { OP_BINARY, OP_CLOSE, OP_TEXT, WebSocketConn } from "./ws.js";

/** Operation ids of the spec this client implements (checked by the test suite). */
export const COVERED = new Set<string>();
const op = (...ids: string[]) => { for (const id of ids) COVERED.add(id); };

// `await using` needs Symbol.asyncDispose (Node 20 has it; older runtimes get the registered one).
if (!(Symbol as { asyncDispose?: symbol }).asyncDispose) {
  Object.defineProperty(Symbol, "asyncDispose", { value: Symbol.for("Symbol.asyncDispose") });
}

function clean<V extends object>(o: V): V {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined && v !== null)) as V;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

function b64(s: string | undefined): Uint8Array {
  if (!s) return new Uint8Array(0);
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// ------------------------------------------------------------------ processes

/** A piece of output: `stream` is stdout, stderr or pty. */
export interface ProcessOutput {
  stream: "stdout" | "stderr" | "pty";
  data: Uint8Array;
  text: string;
}

/** How a process ended, with its output when captured. */
export interface ExecResult {
  exitCode: number;
  signal: number;
  status: string;
  error: string;
  stdout: string;
  stderr: string;
  ok: boolean;
}

export interface StartOptions {
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
  /** Keep stdin open for sendStdin / closeStdin. */
  stdin?: boolean;
  tag?: string;
  timeoutSeconds?: number;
  signal?: AbortSignal;
}

export interface ExecOptions extends Omit<StartOptions, "stdin" | "tag"> {
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  /** Written to the process's stdin, which is then closed. */
  input?: string | Uint8Array;
}

/**
 * A process with its event stream attached. Iterate it (`for await`) for output pieces, or
 * `wait()`. `disconnect()` drops the stream; the process keeps running, and any client
 * re-attaches with `sandbox.attach(pid)`.
 */
export class Process implements AsyncIterable<ProcessOutput> {
  pid: number;
  result: ExecResult | undefined;
  private events: AsyncGenerator<T.ProcessEvent>;
  private pending: T.ProcessEvent | undefined;
  private ctl: AbortController;

  constructor(readonly sandbox: Sandbox, resp: Response, ctl: AbortController, pid = 0, readonly tag = "") {
    this.pid = pid;
    this.ctl = ctl;
    this.events = ndjson<T.ProcessEvent>(resp);
  }

  /** @internal */
  async start(): Promise<void> {
    const r = await this.events.next();
    if (r.done) throw new StreamError("process stream ended before the start event");
    if (r.value.type !== "start") this.pending = r.value;
    else if ((r.value as T.ProcessStartEvent).pid) this.pid = (r.value as T.ProcessStartEvent).pid;
  }

  /** The raw events (`data` still base64), up to the end event. */
  async *rawEvents(): AsyncGenerator<T.ProcessEvent> {
    for (;;) {
      let ev: T.ProcessEvent;
      if (this.pending) {
        ev = this.pending;
        this.pending = undefined;
      } else {
        const r = await this.events.next();
        if (r.done) {
          if (!this.result) throw new StreamError("process stream ended before the end event");
          return;
        }
        ev = r.value;
      }
      if (ev.type === "start" && (ev as T.ProcessStartEvent).pid) this.pid = (ev as T.ProcessStartEvent).pid;
      if (ev.type === "error") {
        this.disconnect();
        throw errorFromEvent(ev as T.StreamErrorEvent);
      }
      if (ev.type === "end") {
        const e = ev as T.ProcessEndEvent;
        this.result = { exitCode: e.exit_code ?? 0, signal: e.signal ?? 0, status: e.status ?? "", error: e.error ?? "",
          stdout: "", stderr: "", ok: (e.exit_code ?? 0) === 0 && !e.signal && !e.error };
        yield ev;
        this.disconnect();
        return;
      }
      yield ev;
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<ProcessOutput> {
    for await (const ev of this.rawEvents()) {
      if (ev.type === "stdout" || ev.type === "stderr" || ev.type === "pty") {
        const data = b64((ev as T.ProcessOutputEvent).data);
        yield { stream: ev.type, data, text: dec.decode(data) };
      }
    }
  }

  /** Reads to the end, calling the callbacks as output arrives; returns how it ended. */
  async wait(onStdout?: (s: string) => void, onStderr?: (s: string) => void): Promise<ExecResult> {
    let out = "";
    let err = "";
    const od = new TextDecoder();
    const ed = new TextDecoder();
    for await (const p of this) {
      if (p.stream === "stderr") {
        const s = ed.decode(p.data, { stream: true });
        err += s;
        onStderr?.(s);
      } else {
        const s = od.decode(p.data, { stream: true });
        out += s;
        onStdout?.(s);
      }
    }
    if (!this.result) throw new StreamError("process stream ended before the end event");
    this.result.stdout = out + od.decode();
    this.result.stderr = err + ed.decode();
    return this.result;
  }

  sendStdin(data: string | Uint8Array): Promise<void> { return this.sandbox.sendStdin(this.pid, data); }
  closeStdin(): Promise<void> { return this.sandbox.closeStdin(this.pid); }
  signal(sig = "SIGTERM"): Promise<void> { return this.sandbox.signal(this.pid, sig); }
  kill(): Promise<void> { return this.sandbox.signal(this.pid, "SIGKILL"); }

  /** Closes this client's stream; the process keeps running. */
  disconnect(): void {
    this.ctl.abort();
    void this.events.return(undefined).catch(() => {});
  }
}

// ------------------------------------------------------------------ code

/** One rich result of a cell (a MIME bundle); binary formats decode with `bytes()`. */
export class CodeResult {
  constructor(readonly raw: T.CodeResultEvent & Record<string, unknown>) {}
  get isMainResult(): boolean { return Boolean(this.raw.is_main_result); }
  get text(): string | undefined { return this.raw.text as string | undefined; }
  get png(): string | undefined { return this.raw.png as string | undefined; }
  formats(): string[] {
    return Object.keys(this.raw).filter((k) => !["type", "is_main_result", "extra"].includes(k) && this.raw[k] != null);
  }
  /** Decodes a base64 format (png, jpeg, pdf) to bytes. */
  bytes(format: "png" | "jpeg" | "pdf" = "png"): Uint8Array | undefined {
    const v = this.raw[format] as string | undefined;
    return v ? b64(v) : undefined;
  }
}

export interface CodeError { name: string; value: string; traceback: string }

export interface Execution {
  results: CodeResult[];
  stdout: string[];
  stderr: string[];
  error: CodeError | undefined;
  executionCount: number;
  /** The main result's text. */
  text: string | undefined;
}

export interface RunCodeOptions {
  language?: string;
  contextId?: string;
  env?: Record<string, string>;
  timeoutSeconds?: number;
  user?: string;
  onStdout?: (s: string) => void;
  onStderr?: (s: string) => void;
  onResult?: (r: CodeResult) => void;
  onError?: (e: CodeError) => void;
  signal?: AbortSignal;
}

// ------------------------------------------------------------------ files

/** Files of one sandbox. */
export class Files {
  constructor(private sb: Sandbox, private tr: Transport) {}
  private p(s: string) { return `/v1/sandboxes/${seg(this.sb.id)}${s}`; }

  /** Opens a file for a streaming read; the Response's body is a ReadableStream. */
  async open(path: string, o: { user?: string; offset?: number; length?: number; signal?: AbortSignal } = {}): Promise<Response> {
    op("readFile");
    const headers: Record<string, string> = {};
    if (o.offset || o.length) headers.range = `bytes=${o.offset ?? 0}-${o.length ? (o.offset ?? 0) + o.length - 1 : ""}`;
    return this.tr.request("GET", this.p("/files"), { query: { path, user: o.user }, headers, accept: "application/octet-stream",
      idempotent: true, stream: true, signal: o.signal });
  }
  async readBytes(path: string, o: { user?: string } = {}): Promise<Uint8Array> {
    return new Uint8Array(await (await this.open(path, o)).arrayBuffer());
  }
  async readText(path: string, o: { user?: string } = {}): Promise<string> {
    return (await this.open(path, o)).text();
  }
  read(path: string, o: { user?: string } = {}): Promise<string> { return this.readText(path, o); }
  /** Yields a file's content in chunks, never holding more than one. */
  async *stream(path: string, o: { user?: string; signal?: AbortSignal } = {}): AsyncGenerator<Uint8Array> {
    yield* chunks(await this.open(path, o));
  }
  /** Streams a file to a local path (Node). Returns the bytes written. */
  async download(path: string, dest: string, o: { user?: string } = {}): Promise<number> {
    const fs = await import("node:fs" as string);
    const out = fs.createWriteStream(dest);
    let n = 0;
    try {
      for await (const c of this.stream(path, o)) {
        n += c.length;
        if (!out.write(c)) await new Promise((r) => out.once("drain", r));
      }
    } finally {
      await new Promise((r) => out.end(r));
    }
    return n;
  }
  /** Writes a file; strings and bytes are sent at once, streams and iterables streamed. */
  write(path: string, data: Body, o: { mode?: number; user?: string; signal?: AbortSignal } = {}): Promise<T.Entry> {
    op("writeFile");
    return this.tr.call("PUT", this.p("/files"), { query: { path, user: o.user, mode: o.mode === undefined ? undefined : o.mode.toString(8).padStart(4, "0") },
      body: data, contentType: "application/octet-stream", idempotent: true, stream: true, signal: o.signal });
  }
  /** Streams a local file into the sandbox (Node). */
  async upload(path: string, src: string, o: { mode?: number; user?: string } = {}): Promise<T.Entry> {
    const fs = await import("node:fs" as string);
    return this.write(path, fs.createReadStream(src) as AsyncIterable<Uint8Array>, o);
  }
  async remove(path: string): Promise<void> { op("removeFile"); await this.tr.call("DELETE", this.p("/files"), { query: { path }, idempotent: true }); }
  stat(path: string): Promise<T.Entry> { op("statFile"); return this.tr.call("GET", this.p("/fs/stat"), { query: { path }, idempotent: true }); }
  async exists(path: string): Promise<boolean> {
    try { await this.stat(path); return true; } catch (e) { if (e instanceof NotFoundError) return false; throw e; }
  }
  async list(path: string, o: { depth?: number } = {}): Promise<T.Entry[]> {
    op("listDir");
    return (await this.tr.call<T.EntryList>("GET", this.p("/fs/list"), { query: { path, depth: o.depth }, idempotent: true })).entries ?? [];
  }
  mkdir(path: string): Promise<T.Entry> { op("makeDir"); return this.tr.call("POST", this.p("/fs/mkdir"), { json: { path } }); }
  move(source: string, destination: string): Promise<T.Entry> { op("moveFile"); return this.tr.call("POST", this.p("/fs/move"), { json: { source, destination } }); }
  /** Watches a directory; resolves once the watch is in place. Iterate the result; `close()` ends it. */
  async watch(path: string, o: { recursive?: boolean } = {}): Promise<Watch> {
    op("watchDir");
    const ctl = new AbortController();
    const resp = await this.tr.request("GET", this.p("/fs/watch"), { query: { path, recursive: o.recursive }, accept: "application/x-ndjson",
      idempotent: true, stream: true, signal: ctl.signal });
    const w = new Watch(resp, ctl);
    await w.ready();
    return w;
  }
  /** A tar stream of the directory (Response body). */
  downloadArchive(path: string): Promise<Response> {
    op("downloadArchive");
    return this.tr.request("GET", this.p("/archive"), { query: { path }, accept: "application/x-tar", idempotent: true, stream: true });
  }
  async uploadArchive(path: string, tar: Body): Promise<void> {
    op("uploadArchive");
    await this.tr.call("PUT", this.p("/archive"), { query: { path }, body: tar, contentType: "application/x-tar", idempotent: true, stream: true });
  }
  presign(path: string, opName: "read" | "write", o: { expiresSeconds?: number; user?: string } = {}): Promise<T.PresignResponse> {
    op("presignFile");
    return this.tr.call("POST", this.p("/files/presign"), { json: clean({ path, op: opName, expires_seconds: o.expiresSeconds, user: o.user }), idempotent: true });
  }
  /** A URL that reads the file without an API key until it expires. */
  async downloadUrl(path: string, o: { expiresSeconds?: number; user?: string } = {}): Promise<string> {
    return (await this.presign(path, "read", o)).url;
  }
  /** A URL that accepts a PUT of the file's content without an API key. */
  async uploadUrl(path: string, o: { expiresSeconds?: number; user?: string } = {}): Promise<string> {
    return (await this.presign(path, "write", o)).url;
  }
}

/** A file-system watch: `for await (const ev of watch)`. */
export class Watch implements AsyncIterable<T.WatchEvent> {
  private it: AsyncGenerator<T.WatchEvent>;
  private pending: T.WatchEvent | undefined;
  constructor(resp: Response, private ctl: AbortController) { this.it = ndjson<T.WatchEvent>(resp); }
  /** @internal */
  async ready(): Promise<void> {
    const r = await this.it.next();
    if (!r.done && r.value.type !== "start") this.pending = r.value;
  }
  async *[Symbol.asyncIterator](): AsyncGenerator<T.WatchEvent> {
    try {
      if (this.pending) {
        const p = this.pending;
        this.pending = undefined;
        if (p.type === "error") throw errorFromEvent(p as { code?: string; message?: string });
        yield p;
      }
      for (;;) {
        const r = await this.it.next();
        if (r.done) return;
        if (r.value.type === "error") throw errorFromEvent(r.value as { code?: string; message?: string });
        yield r.value;
      }
    } catch (e) {
      if (this.ctl.signal.aborted) return;
      throw e;
    }
  }
  close(): void { this.ctl.abort(); void this.it.return(undefined).catch(() => {}); }
}

// ------------------------------------------------------------------ pty

/** An interactive terminal: `for await (const data of pty)`, `write`, `resize`. */
export class Pty implements AsyncIterable<Uint8Array> {
  exitCode: number | undefined;
  private done = false;
  constructor(private ws: WebSocketConn) {}
  write(data: string | Uint8Array): void { this.ws.send(OP_BINARY, typeof data === "string" ? enc.encode(data) : data); }
  resize(cols: number, rows: number): void { this.ws.send(OP_TEXT, enc.encode(JSON.stringify({ type: "resize", cols, rows }))); }
  /** The next output bytes, or undefined once the terminal has closed. */
  async read(): Promise<Uint8Array | undefined> {
    while (!this.done) {
      const m = await this.ws.recv();
      if (m.op === OP_BINARY) return m.data;
      if (m.op === OP_TEXT) {
        try {
          const msg = JSON.parse(dec.decode(m.data));
          if (msg?.type === "exit") this.exitCode = Number(msg.exit_code ?? 0);
        } catch { /* not ours */ }
        continue;
      }
      if (m.op === OP_CLOSE) this.done = true;
    }
    return undefined;
  }
  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array> {
    for (let b = await this.read(); b !== undefined; b = await this.read()) yield b;
  }
  /** Reads until the terminal closes; returns the exit code. */
  async wait(onData?: (b: Uint8Array) => void): Promise<number | undefined> {
    for await (const b of this) onData?.(b);
    return this.exitCode;
  }
  close(): void { this.done = true; this.ws.close(); }
}

// ------------------------------------------------------------------ sandbox

/** A handle on one sandbox; `await using sb = ...` kills it at the end of the scope. */
export class Sandbox {
  readonly id: string;
  info: T.Sandbox;
  readonly files: Files;
  private tr: Transport;

  constructor(readonly client: Warden, info: T.Sandbox) {
    this.tr = client.transport;
    this.info = info;
    this.id = info.id;
    this.files = new Files(this, this.tr);
  }

  get state(): string { return this.info.state; }
  private p(s = "") { return `/v1/sandboxes/${seg(this.id)}${s}`; }

  async [Symbol.asyncDispose](): Promise<void> {
    try { await this.kill(); } catch (e) { if (!(e instanceof NotFoundError || e instanceof ConflictError)) throw e; }
  }

  async refresh(): Promise<T.Sandbox> { this.info = await this.client.sandboxes.info(this.id); return this.info; }
  async kill(): Promise<void> { op("killSandbox"); await this.tr.call("DELETE", this.p(), { idempotent: true }); }
  async setTimeout(seconds: number): Promise<T.Sandbox> {
    op("setSandboxTimeout");
    return (this.info = await this.tr.call("POST", this.p("/timeout"), { json: { timeout_seconds: seconds }, idempotent: true }));
  }
  async pause(): Promise<T.Sandbox> { op("pauseSandbox"); return (this.info = await this.tr.call("POST", this.p("/pause"), { idempotent: true })); }
  async resume(): Promise<T.Sandbox> { op("resumeSandbox"); return (this.info = await this.tr.call("POST", this.p("/resume"), { idempotent: true })); }
  /** Copies the running sandbox into `count` new ones (gvisor). */
  async fork(o: { count?: number; name?: string; timeoutSeconds?: number; metadata?: Record<string, string> } = {}): Promise<Sandbox[]> {
    op("forkSandbox");
    const r = await this.tr.call<T.ForkSandboxResponse>("POST", this.p("/fork"),
      { json: clean({ count: o.count, name: o.name, timeout_seconds: o.timeoutSeconds, metadata: o.metadata }) });
    return (r.sandboxes ?? []).map((s) => new Sandbox(this.client, s));
  }
  /** Saves the sandbox's files (it keeps running) as a snapshot, named `name` or by its id;
   * `memory` also keeps its memory (gvisor): sandboxes from it run on from that moment. */
  snapshot(name?: string, memory?: boolean): Promise<T.Snapshot> {
    op("createSnapshot");
    return this.tr.call("POST", this.p("/snapshots"), { json: clean({ name, memory }) });
  }
  network(): Promise<T.NetworkStatus> { op("getNetwork"); return this.tr.call("GET", this.p("/network"), { idempotent: true }); }
  /** Replaces the network policy; an `allow` entry is a rule or a host name. */
  setNetwork(mode: T.NetworkPolicy["mode"], allow?: Array<string | T.NetworkPolicyAllowItem>): Promise<T.NetworkStatus> {
    op("setNetwork");
    const rules = allow?.map((a) => (typeof a === "string" ? { host: a } : a));
    return this.tr.call("PUT", this.p("/network"), { json: clean({ mode, allow: rules }), idempotent: true });
  }
  usage(): Promise<T.Usage> { op("getSandboxUsage"); return this.tr.call("GET", this.p("/usage"), { idempotent: true }); }
  /** The output the agent kept of the sandbox's processes (`data` base64). */
  async *logs(o: { pid?: number; follow?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<T.LogEvent> {
    op("getSandboxLogs");
    const r = await this.tr.request("GET", this.p("/logs"), { query: { pid: o.pid, follow: o.follow }, accept: "application/x-ndjson",
      idempotent: true, stream: true, signal: o.signal });
    for await (const ev of ndjson<T.LogEvent>(r)) {
      if (ev.stream === "error") throw errorFromEvent(ev);
      yield ev;
    }
  }

  /** Starts a process (a string is a shell line, an array an argv) with its stream attached. */
  async start(cmd: string | string[], o: StartOptions = {}): Promise<Process> {
    op("execProcess");
    const body: Record<string, unknown> = typeof cmd === "string" ? { command: cmd } : { cmd };
    Object.assign(body, clean({ env: o.env, cwd: o.cwd, user: o.user, tag: o.tag, timeout_seconds: o.timeoutSeconds }));
    if (o.stdin) body.stdin = true;
    const ctl = new AbortController();
    o.signal?.addEventListener("abort", () => ctl.abort(o.signal?.reason), { once: true });
    const r = await this.tr.request("POST", this.p("/exec"), { json: body, accept: "application/x-ndjson", stream: true, signal: ctl.signal });
    const p = new Process(this, r, ctl, 0, o.tag ?? "");
    try { await p.start(); } catch (e) { p.disconnect(); throw e; }
    return p;
  }

  /** Runs a command to its end, streaming output to the callbacks; returns how it ended. */
  async exec(cmd: string | string[], o: ExecOptions = {}): Promise<ExecResult> {
    const p = await this.start(cmd, { ...o, stdin: o.input !== undefined });
    let feeding: Promise<void> | undefined;
    if (o.input !== undefined) {
      const data = typeof o.input === "string" ? enc.encode(o.input) : o.input;
      feeding = (async () => {
        try {
          for (let i = 0; i < data.length; i += 256 << 10) await p.sendStdin(data.subarray(i, i + (256 << 10)));
          await p.closeStdin();
        } catch (e) {
          if (!(e instanceof ConflictError || e instanceof NotFoundError)) throw e;
        }
      })();
    }
    try {
      const res = await p.wait(o.onStdout, o.onStderr);
      await feeding;
      return res;
    } finally {
      p.disconnect();
    }
  }

  /** Attaches to a process started earlier, by any client. */
  async attach(pid: number, o: { replay?: boolean; signal?: AbortSignal } = {}): Promise<Process> {
    op("streamProcess");
    const ctl = new AbortController();
    o.signal?.addEventListener("abort", () => ctl.abort(o.signal?.reason), { once: true });
    const r = await this.tr.request("GET", this.p(`/processes/${pid}/stream`), { query: { replay: o.replay ?? true },
      accept: "application/x-ndjson", idempotent: true, stream: true, signal: ctl.signal });
    return new Process(this, r, ctl, pid);
  }
  async processes(): Promise<T.ProcessInfo[]> {
    op("listProcesses");
    return (await this.tr.call<T.ProcessList>("GET", this.p("/processes"), { idempotent: true })).processes ?? [];
  }
  async sendStdin(pid: number, data: string | Uint8Array): Promise<void> {
    op("sendProcessStdin");
    await this.tr.call("POST", this.p(`/processes/${pid}/stdin`), { body: data, contentType: "application/octet-stream" });
  }
  async closeStdin(pid: number): Promise<void> { op("closeProcessStdin"); await this.tr.call("POST", this.p(`/processes/${pid}/close-stdin`), { idempotent: true }); }
  async signal(pid: number, sig = "SIGTERM"): Promise<void> { op("signalProcess"); await this.tr.call("POST", this.p(`/processes/${pid}/signal`), { json: { signal: sig } }); }

  /** Opens an interactive terminal running cmd (default /bin/bash). Node only. */
  async pty(o: { cmd?: string; args?: string[]; cols?: number; rows?: number; user?: string } = {}): Promise<Pty> {
    op("openPty");
    const q: Query = { cols: o.cols ?? 80, rows: o.rows ?? 24, cmd: o.cmd, arg: o.args ?? [], user: o.user };
    return new Pty(await WebSocketConn.connect(this.tr.url(this.p("/pty"), q), this.tr.headers(undefined, "*/*"), this.tr.timeoutMs, this.tr.socketPath));
  }

  /** Runs a cell in a stateful interpreter and returns its results. */
  async runCode(code: string, o: RunCodeOptions = {}): Promise<Execution> {
    op("runCode");
    const r = await this.tr.request("POST", this.p("/code/run"), { json: clean({ code, language: o.language, context_id: o.contextId, env: o.env,
      timeout_seconds: o.timeoutSeconds, user: o.user }), accept: "application/x-ndjson", stream: true, signal: o.signal });
    const ex: Execution = { results: [], stdout: [], stderr: [], error: undefined, executionCount: 0, text: undefined };
    for await (const ev of ndjson<Record<string, unknown>>(r)) {
      switch (ev.type) {
        case "stdout": ex.stdout.push(String(ev.text ?? "")); o.onStdout?.(String(ev.text ?? "")); break;
        case "stderr": ex.stderr.push(String(ev.text ?? "")); o.onStderr?.(String(ev.text ?? "")); break;
        case "result": {
          const res = new CodeResult(ev as T.CodeResultEvent & Record<string, unknown>);
          ex.results.push(res);
          if (res.isMainResult) ex.text = res.text;
          o.onResult?.(res);
          break;
        }
        case "error":
          if (!("name" in ev) && "code" in ev) throw errorFromEvent(ev as { code?: string; message?: string });
          ex.error = { name: String(ev.name ?? ""), value: String(ev.value ?? ""), traceback: String(ev.traceback ?? "") };
          o.onError?.(ex.error);
          break;
        case "number_of_executions": ex.executionCount = Number(ev.execution_count ?? 0); break;
        case "end_of_execution": return ex;
        case "unexpected_end_of_execution": throw new StreamError("code run ended unexpectedly");
      }
    }
    throw new StreamError("code run ended before end_of_execution");
  }
  createCodeContext(o: { language?: string; cwd?: string; user?: string } = {}): Promise<T.CodeContext> {
    op("createCodeContext");
    return this.tr.call("POST", this.p("/code/contexts"), { json: clean(o) });
  }
  async codeContexts(): Promise<T.CodeContext[]> {
    op("listCodeContexts");
    return (await this.tr.call<T.CodeContextList>("GET", this.p("/code/contexts"), { idempotent: true })).contexts ?? [];
  }
  async restartCodeContext(id: string): Promise<void> { op("restartCodeContext"); await this.tr.call("POST", this.p(`/code/contexts/${seg(id)}/restart`)); }
  async interruptCodeContext(id: string): Promise<void> { op("interruptCodeContext"); await this.tr.call("POST", this.p(`/code/contexts/${seg(id)}/interrupt`)); }
  async deleteCodeContext(id: string): Promise<void> { op("deleteCodeContext"); await this.tr.call("DELETE", this.p(`/code/contexts/${seg(id)}`)); }

  // git

  private git(opName: string, body: object, timeoutSeconds?: number): Promise<T.GitResult> {
    // The response comes when git ends: wait as long as the command may run.
    const base = this.tr.timeoutMs;
    const timeoutMs = base > 0 ? Math.max(base, ((timeoutSeconds ?? 600) + 30) * 1000) : base;
    return this.tr.call("POST", this.p(`/git/${opName}`), { json: clean(body), timeoutMs });
  }
  /**
   * Clones an https repository into the sandbox as its default user (`path`: relative to the
   * user's home or absolute; default the repository's name). `secret`, the id of a secret you
   * own holding a token, is brokered for the URL's host for this command only: the token never
   * enters the sandbox. A git failure is a non-zero `exit_code` with the tails of git's output,
   * not an error.
   */
  gitClone(url: string, o: { path?: string; branch?: string; depth?: number; secret?: string; timeoutSeconds?: number } = {}): Promise<T.GitResult> {
    op("gitClone");
    const body: T.GitCloneRequest = { url, path: o.path, branch: o.branch, depth: o.depth, secret: o.secret, timeout_seconds: o.timeoutSeconds };
    return this.git("clone", body, o.timeoutSeconds);
  }
  /** Pulls (fast-forward only) the repository at `path`; `secret` as for gitClone. */
  gitPull(path: string, o: GitRemoteOptions = {}): Promise<T.GitResult> {
    op("gitPull");
    return this.git("pull", gitRemote(path, o), o.timeoutSeconds);
  }
  /**
   * Commits in the repository at `path`, every change staged first unless `all` is false; an
   * author given is also the committer. The result's `head` is the new commit.
   */
  gitCommit(path: string, message: string, o: { authorName?: string; authorEmail?: string; all?: boolean; timeoutSeconds?: number } = {}): Promise<T.GitResult> {
    op("gitCommit");
    const body: T.GitCommitRequest = { path, message, author_name: o.authorName, author_email: o.authorEmail, all: o.all, timeout_seconds: o.timeoutSeconds };
    return this.git("commit", body, o.timeoutSeconds);
  }
  /** Pushes the repository at `path` (`remote` default origin); `secret` as for gitClone. */
  gitPush(path: string, o: GitRemoteOptions = {}): Promise<T.GitResult> {
    op("gitPush");
    return this.git("push", gitRemote(path, o), o.timeoutSeconds);
  }
  /** The branch, HEAD, upstream, ahead/behind counts and changed paths of the repository at `path`. */
  gitStatus(path: string): Promise<T.GitResult> {
    op("gitStatus");
    return this.tr.call("GET", this.p("/git/status"), { query: { path }, idempotent: true });
  }

  /** Makes the port reachable without credentials (`public: false`: private again). */
  publishPort(port: number, o: { public?: boolean } = {}): Promise<T.Port> {
    op("publishPort");
    return this.tr.call("POST", this.p(`/ports/${port}`), { json: { public: o.public ?? true }, idempotent: true });
  }
  async unpublishPort(port: number): Promise<void> { op("unpublishPort"); await this.tr.call("DELETE", this.p(`/ports/${port}`), { idempotent: true }); }
  previewUrl(port: number, o: { expiresSeconds?: number } = {}): Promise<T.PreviewURL> {
    op("createPreviewURL");
    return this.tr.call("POST", this.p(`/ports/${port}/url`), { json: clean({ expires_seconds: o.expiresSeconds }) });
  }
  /** The daemon's URL of path on the sandbox's port (send the API key, or use previewUrl). */
  proxyUrl(port: number, path = ""): string { op("proxyPort"); return `${this.tr.baseUrl}${this.p(`/ports/${port}/proxy/`)}${path.replace(/^\/+/, "")}`; }
}

// pre-register methods whose op() runs only when called
op("readFile", "writeFile", "removeFile", "statFile", "listDir", "makeDir", "moveFile", "watchDir", "downloadArchive", "uploadArchive",
  "presignFile", "killSandbox", "setSandboxTimeout", "pauseSandbox", "resumeSandbox", "forkSandbox", "createSnapshot", "getNetwork", "setNetwork",
  "getSandboxUsage", "getSandboxLogs", "execProcess", "streamProcess", "listProcesses", "sendProcessStdin", "closeProcessStdin",
  "signalProcess", "openPty", "runCode", "createCodeContext", "listCodeContexts", "restartCodeContext", "interruptCodeContext",
  "deleteCodeContext", "publishPort", "unpublishPort", "createPreviewURL", "proxyPort", "gitClone", "gitPull", "gitCommit", "gitPush",
  "gitStatus");

/** Options of Sandbox.gitPull and gitPush. */
export interface GitRemoteOptions {
  /** Default origin. */
  remote?: string;
  branch?: string;
  /** A secret (id) you own holding a token, brokered for the remote's host for this command. */
  secret?: string;
  timeoutSeconds?: number;
}

function gitRemote(path: string, o: GitRemoteOptions): T.GitRemoteRequest {
  return { path, remote: o.remote, branch: o.branch, secret: o.secret, timeout_seconds: o.timeoutSeconds };
}

// ------------------------------------------------------------------ namespaces

export interface CreateSandboxOptions {
  template?: string;
  name?: string;
  isolation?: T.CreateSandboxRequest["isolation"];
  cpuMillis?: number;
  memoryMb?: number;
  diskMb?: number;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  timeoutSeconds?: number;
  user?: string;
  workdir?: string;
  autoPause?: boolean;
  autoResume?: boolean;
  sudo?: boolean;
  network?: T.NetworkPolicy;
  /** Start from one of your snapshots (name or id) instead of a template. */
  snapshot?: string;
}

export class Sandboxes {
  constructor(private c: Warden, private tr: Transport) {}
  /** Creates a sandbox and returns it running. */
  async create(o: CreateSandboxOptions = {}): Promise<Sandbox> {
    const body: T.CreateSandboxRequest = clean({ template: o.template, name: o.name, isolation: o.isolation, cpu_millis: o.cpuMillis,
      memory_mb: o.memoryMb, disk_mb: o.diskMb, env: o.env, metadata: o.metadata, timeout_seconds: o.timeoutSeconds, user: o.user,
      workdir: o.workdir, auto_pause: o.autoPause, auto_resume: o.autoResume, sudo: o.sudo, network: o.network,
      snapshot: o.snapshot });
    return new Sandbox(this.c, await this.tr.call<T.Sandbox>("POST", "/v1/sandboxes", { json: body }));
  }
  info(ref: string): Promise<T.Sandbox> { return this.tr.call("GET", `/v1/sandboxes/${seg(ref)}`, { idempotent: true }); }
  /** A handle on an existing sandbox, by ID or name. */
  async get(ref: string): Promise<Sandbox> { return new Sandbox(this.c, await this.info(ref)); }
  listPage(o: { state?: string | string[]; metadata?: Record<string, string>; limit?: number; pageToken?: string } = {}): Promise<T.SandboxList> {
    const q: Query = { limit: o.limit, page_token: o.pageToken };
    if (o.state) q.state = Array.isArray(o.state) ? o.state.join(",") : o.state;
    if (o.metadata) q.metadata = Object.keys(o.metadata).sort().map((k) => `${k}:${o.metadata![k]}`).join(",");
    return this.tr.call("GET", "/v1/sandboxes", { query: q, idempotent: true });
  }
  /** Every visible sandbox, following pages. */
  async *list(o: { state?: string | string[]; metadata?: Record<string, string> } = {}): AsyncGenerator<T.Sandbox> {
    let token: string | undefined;
    for (;;) {
      const page = await this.listPage({ ...o, pageToken: token });
      yield* page.sandboxes ?? [];
      const next = page.next_page_token || undefined;
      if (!next || next === token) return;
      token = next;
    }
  }
  async kill(ref: string): Promise<void> { await new Sandbox(this.c, { id: ref } as T.Sandbox).kill(); }
}
op("createSandbox", "getSandbox", "listSandboxes");

export interface BuildOptions {
  dockerfile?: string;
  buildArgs?: Record<string, string>;
  noCache?: boolean;
  network?: "none" | "allowlist" | "open";
  allow?: string[];
  cpuMillis?: number;
  memoryMb?: number;
  diskMb?: number;
  onEvent?: (ev: T.TemplateEvent) => void;
  onLog?: (line: string) => void;
  signal?: AbortSignal;
}

export class Templates {
  constructor(private tr: Transport) {}
  async list(): Promise<T.Template[]> { return (await this.tr.call<T.TemplateList>("GET", "/v1/templates", { idempotent: true })).templates ?? []; }
  get(name: string): Promise<T.Template> { return this.tr.call("GET", `/v1/templates/${seg(name)}`, { idempotent: true }); }
  async delete(name: string): Promise<void> { await this.tr.call("DELETE", `/v1/templates/${seg(name)}`, { idempotent: true }); }
  usage(): Promise<T.TemplateUsage> { return this.tr.call("GET", "/v1/template-store/usage", { idempotent: true }); }
  gc(): Promise<T.GCReport> { return this.tr.call("POST", "/v1/template-store/gc", { idempotent: true }); }
  private async events(r: Response, each?: (ev: T.TemplateEvent) => void): Promise<T.TemplateEvent> {
    let result: T.TemplateEvent | undefined;
    for await (const ev of ndjson<T.TemplateEvent>(r)) {
      each?.(ev);
      if (ev.type === "error") throw errorFromEvent(ev as { code?: string; message?: string });
      if (ev.type === "result") result = ev;
    }
    if (!result) throw new StreamError("template stream ended before its result");
    return result;
  }
  /** Builds a template from a build context tar (bytes or a stream); streams events and RUN output. */
  async build(name: string, contextTar: Body, o: BuildOptions = {}): Promise<Record<string, unknown>> {
    const q: Query = { name, dockerfile: o.dockerfile, no_cache: o.noCache, network: o.network, allow: o.allow?.join(","),
      cpu_millis: o.cpuMillis, memory_mb: o.memoryMb, disk_mb: o.diskMb,
      build_arg: Object.entries(o.buildArgs ?? {}).map(([k, v]) => `${k}=${v}`) };
    const r = await this.tr.request("POST", "/v1/templates/build", { query: q, body: contextTar, contentType: "application/x-tar",
      accept: "application/x-ndjson", stream: true, signal: o.signal });
    const res = await this.events(r, (ev) => {
      o.onEvent?.(ev);
      if (ev.type === "log") o.onLog?.(String((ev as { text?: string }).text ?? ""));
    });
    return ((res as { build?: Record<string, unknown> }).build ?? res) as Record<string, unknown>;
  }
  /** Imports an OCI or Docker image from a registry. */
  async importImage(req: T.ImportRequest, o: { onEvent?: (ev: T.TemplateEvent) => void } = {}): Promise<T.Template> {
    const r = await this.tr.request("POST", "/v1/templates/import", { json: req, accept: "application/x-ndjson", stream: true });
    return (await this.events(r, o.onEvent) as { template: T.Template }).template;
  }
  /** Imports a docker-save or OCI-layout tar (streamed). */
  async importArchive(name: string, archive: Body, o: { format?: string; tag?: string; platform?: string; start?: boolean;
    onEvent?: (ev: T.TemplateEvent) => void } = {}): Promise<T.Template> {
    const r = await this.tr.request("POST", "/v1/templates/import", { query: { name, format: o.format, tag: o.tag, platform: o.platform, start: o.start },
      body: archive, contentType: "application/x-tar", accept: "application/x-ndjson", stream: true });
    return (await this.events(r, o.onEvent) as { template: T.Template }).template;
  }
}
op("listTemplates", "getTemplate", "deleteTemplate", "templateStoreUsage", "templateStoreGC", "buildTemplate", "importTemplate");

export class Secrets {
  constructor(private tr: Transport) {}
  put(name: string, value: string): Promise<T.Secret> { return this.tr.call("POST", "/v1/secrets", { json: { name, value } }); }
  async list(): Promise<T.Secret[]> { return (await this.tr.call<{ secrets?: T.Secret[] }>("GET", "/v1/secrets", { idempotent: true })).secrets ?? []; }
  async revoke(id: string): Promise<void> { await this.tr.call("POST", `/v1/secrets/${seg(id)}/revoke`, { idempotent: true }); }
  async delete(id: string): Promise<void> { await this.tr.call("DELETE", `/v1/secrets/${seg(id)}`, { idempotent: true }); }
  grant(secretId: string, g: T.Grant): Promise<T.Grant> { return this.tr.call("POST", `/v1/secrets/${seg(secretId)}/grants`, { json: g }); }
  async grants(secretId: string): Promise<T.Grant[]> {
    return (await this.tr.call<{ grants?: T.Grant[] }>("GET", `/v1/secrets/${seg(secretId)}/grants`, { idempotent: true })).grants ?? [];
  }
  async revokeGrant(grantId: string): Promise<void> { await this.tr.call("DELETE", `/v1/grants/${seg(grantId)}`, { idempotent: true }); }
}
op("putSecret", "listSecrets", "revokeSecret", "deleteSecret", "createGrant", "listGrants", "revokeGrant");

export class Keys {
  constructor(private tr: Transport) {}
  /** Creates an API key; the secret `key` is returned only here. */
  create(req: T.CreateKeyRequest): Promise<T.CreateKeyResponse> { return this.tr.call("POST", "/v1/keys", { json: req }); }
  async list(): Promise<T.APIKey[]> { return (await this.tr.call<T.KeyList>("GET", "/v1/keys", { idempotent: true })).keys ?? []; }
  async revoke(id: string): Promise<void> { await this.tr.call("DELETE", `/v1/keys/${seg(id)}`, { idempotent: true }); }
}
op("createKey", "listKeys", "revokeKey");

export class Principals {
  constructor(private tr: Transport) {}
  create(name: string, kind: "user" | "agent" = "agent"): Promise<T.Principal> { return this.tr.call("POST", "/v1/principals", { json: { kind, name } }); }
  async list(): Promise<T.Principal[]> { return (await this.tr.call<T.PrincipalList>("GET", "/v1/principals", { idempotent: true })).principals ?? []; }
}
op("createPrincipal", "listPrincipals");

export class Audit {
  constructor(private tr: Transport) {}
  page(o: { after?: number; limit?: number; target?: string; principal?: string } = {}): Promise<T.AuditList> {
    return this.tr.call("GET", "/v1/audit", { query: o, idempotent: true });
  }
  /** Every audit event after seq `after`, following pages. */
  async *events(o: { after?: number; target?: string; principal?: string } = {}): AsyncGenerator<T.AuditEvent> {
    let after = o.after ?? 0;
    for (;;) {
      const pg = await this.page({ ...o, after });
      const evs = pg.events ?? [];
      yield* evs;
      const next = Number(pg.next_after ?? 0);
      if (!evs.length || next <= after) return;
      after = next;
    }
  }
  verify(): Promise<T.VerifyReport> { return this.tr.call("GET", "/v1/audit/verify", { idempotent: true }); }
  /** Where the retained log starts after audit retention (size 0: nothing deleted). */
  anchor(): Promise<T.AuditAnchor> { return this.tr.call("GET", "/v1/audit/anchor", { idempotent: true }); }
}
op("listAudit", "verifyAudit", "getAuditAnchor");

export class Policies {
  constructor(private tr: Transport) {}
  create(p: T.PolicyWrite): Promise<T.Policy> { return this.tr.call("POST", "/v1/policies", { json: p }); }
  async list(): Promise<T.Policy[]> { return (await this.tr.call<{ policies?: T.Policy[] }>("GET", "/v1/policies", { idempotent: true })).policies ?? []; }
  get(id: string, o: { version?: number } = {}): Promise<T.Policy> { return this.tr.call("GET", `/v1/policies/${seg(id)}`, { query: o, idempotent: true }); }
  update(id: string, p: T.PolicyWrite): Promise<T.Policy> { return this.tr.call("PUT", `/v1/policies/${seg(id)}`, { json: p, idempotent: true }); }
  async delete(id: string): Promise<void> { await this.tr.call("DELETE", `/v1/policies/${seg(id)}`, { idempotent: true }); }
  /** Dry-runs a policy against the audit log. */
  test(req: T.PolicyTestRequest): Promise<T.PolicyTestResult> { return this.tr.call("POST", "/v1/policies/test", { json: req, idempotent: true }); }
  /** Runs the guard's detectors over a text or a JSON value. */
  testGuard(req: T.GuardTestRequest): Promise<T.GuardTestResult> { return this.tr.call("POST", "/v1/guard/test", { json: req, idempotent: true }); }
  /** Measures the guard's detectors on labelled JSONL (`{"text", "label", "split"}` lines). */
  evalGuard(jsonl: Body, o: { split?: string; detectors?: string[] } = {}): Promise<T.GuardEvalReport> {
    return this.tr.call("POST", "/v1/guard/eval", { body: jsonl, contentType: "application/x-ndjson",
      query: { split: o.split, detectors: o.detectors?.join(",") }, idempotent: true, stream: true });
  }
}
op("createPolicy", "listPolicies", "getPolicy", "updatePolicy", "deletePolicy", "testPolicy", "testGuard", "evalGuard");

export class Approvals {
  constructor(private tr: Transport) {}
  async list(o: { state?: string; principal?: string; limit?: number } = {}): Promise<T.Approval[]> {
    return (await this.tr.call<{ approvals?: T.Approval[] }>("GET", "/v1/approvals", { query: o, idempotent: true })).approvals ?? [];
  }
  get(id: string): Promise<T.Approval> { return this.tr.call("GET", `/v1/approvals/${seg(id)}`, { idempotent: true }); }
  approve(id: string, reason?: string): Promise<T.Approval> { return this.tr.call("POST", `/v1/approvals/${seg(id)}/approve`, { json: clean({ reason }) }); }
  reject(id: string, reason?: string): Promise<T.Approval> { return this.tr.call("POST", `/v1/approvals/${seg(id)}/reject`, { json: clean({ reason }) }); }
}
op("listApprovals", "getApproval", "approveApproval", "rejectApproval");

/** The MCP gateway's administration (scope mcp:admin). */
export class MCP {
  constructor(private tr: Transport) {}
  createConnector(c: T.MCPConnectorWrite): Promise<T.MCPConnector> { return this.tr.call("POST", "/v1/mcp/connectors", { json: c }); }
  async connectors(): Promise<T.MCPConnector[]> {
    return (await this.tr.call<{ connectors?: T.MCPConnector[] }>("GET", "/v1/mcp/connectors", { idempotent: true })).connectors ?? [];
  }
  getConnector(id: string): Promise<T.MCPConnector> { return this.tr.call("GET", `/v1/mcp/connectors/${seg(id)}`, { idempotent: true }); }
  updateConnector(id: string, c: T.MCPConnectorWrite): Promise<T.MCPConnector> { return this.tr.call("PUT", `/v1/mcp/connectors/${seg(id)}`, { json: c, idempotent: true }); }
  async deleteConnector(id: string): Promise<void> { await this.tr.call("DELETE", `/v1/mcp/connectors/${seg(id)}`, { idempotent: true }); }
  putCredential(connectorId: string, c: T.MCPCredentialWrite): Promise<T.MCPCredential> {
    return this.tr.call("PUT", `/v1/mcp/connectors/${seg(connectorId)}/credentials`, { json: c, idempotent: true });
  }
  async deleteCredential(connectorId: string, o: { principal?: string; shared?: boolean } = {}): Promise<void> {
    await this.tr.call("DELETE", `/v1/mcp/connectors/${seg(connectorId)}/credentials`, { query: o, idempotent: true });
  }
  createServer(s: T.MCPServerWrite): Promise<T.MCPServer> { return this.tr.call("POST", "/v1/mcp/servers", { json: s }); }
  async servers(): Promise<T.MCPServer[]> { return (await this.tr.call<{ servers?: T.MCPServer[] }>("GET", "/v1/mcp/servers", { idempotent: true })).servers ?? []; }
  getServer(id: string): Promise<T.MCPServer> { return this.tr.call("GET", `/v1/mcp/servers/${seg(id)}`, { idempotent: true }); }
  updateServer(id: string, s: T.MCPServerWrite): Promise<T.MCPServer> { return this.tr.call("PUT", `/v1/mcp/servers/${seg(id)}`, { json: s, idempotent: true }); }
  async deleteServer(id: string): Promise<void> { await this.tr.call("DELETE", `/v1/mcp/servers/${seg(id)}`, { idempotent: true }); }
  async grants(serverId: string): Promise<T.MCPGrant[]> {
    return (await this.tr.call<{ grants?: T.MCPGrant[] }>("GET", `/v1/mcp/servers/${seg(serverId)}/grants`, { idempotent: true })).grants ?? [];
  }
  grant(serverId: string, principal: string): Promise<T.MCPGrant> {
    return this.tr.call("PUT", `/v1/mcp/servers/${seg(serverId)}/grants/${seg(principal)}`, { idempotent: true });
  }
  async revoke(serverId: string, principal: string): Promise<void> {
    await this.tr.call("DELETE", `/v1/mcp/servers/${seg(serverId)}/grants/${seg(principal)}`, { idempotent: true });
  }
  async tools(o: { state?: string; connector?: string; tool?: string } = {}): Promise<T.MCPTool[]> {
    return (await this.tr.call<{ tools?: T.MCPTool[] }>("GET", "/v1/mcp/tools", { query: o, idempotent: true })).tools ?? [];
  }
  approveTool(connector: string, tool: string, hash: string): Promise<T.MCPTool> {
    return this.tr.call("POST", `/v1/mcp/tools/${seg(connector)}/${seg(tool)}/${seg(hash)}/approve`);
  }
  /** Starts a connector's OAuth authorization; returns where to send the user. */
  startOAuth(connectorId: string, req: T.MCPOAuthRequest = {}): Promise<T.MCPOAuthStart> {
    return this.tr.call("POST", `/v1/mcp/connectors/${seg(connectorId)}/oauth`, { json: req });
  }
  rejectTool(connector: string, tool: string, hash: string): Promise<T.MCPTool> {
    return this.tr.call("POST", `/v1/mcp/tools/${seg(connector)}/${seg(tool)}/${seg(hash)}/reject`);
  }
}
op("createMCPConnector", "listMCPConnectors", "getMCPConnector", "updateMCPConnector", "deleteMCPConnector", "putMCPCredential",
  "deleteMCPCredential", "createMCPServer", "listMCPServers", "getMCPServer", "updateMCPServer", "deleteMCPServer", "listMCPGrants",
  "grantMCPServer", "revokeMCPServer", "listMCPTools", "approveMCPTool", "rejectMCPTool", "startMCPOAuth");

/** The states of an agent run that has ended. */
export const RUN_ENDED: ReadonlySet<string> = new Set(["succeeded", "failed", "timed_out", "cancelled"]);

/** Hosted agents: definitions, runs, triggers and their memory. */
export class Agents {
  constructor(private tr: Transport) {}
  create(spec: T.AgentSpec): Promise<T.Agent> { return this.tr.call("POST", "/v1/agents", { json: spec }); }
  async list(): Promise<T.Agent[]> { return (await this.tr.call<{ agents?: T.Agent[] }>("GET", "/v1/agents", { idempotent: true })).agents ?? []; }
  get(name: string): Promise<T.Agent> { return this.tr.call("GET", `/v1/agents/${seg(name)}`, { idempotent: true }); }
  update(name: string, spec: T.AgentSpec): Promise<T.Agent> { return this.tr.call("PUT", `/v1/agents/${seg(name)}`, { json: spec, idempotent: true }); }
  async delete(name: string): Promise<void> { await this.tr.call("DELETE", `/v1/agents/${seg(name)}`, { idempotent: true }); }
  async versions(name: string): Promise<T.AgentVersion[]> {
    return (await this.tr.call<{ versions?: T.AgentVersion[] }>("GET", `/v1/agents/${seg(name)}/versions`, { idempotent: true })).versions ?? [];
  }
  /** Starts a run; returns it queued. */
  run(name: string, input?: unknown): Promise<T.AgentRun> { return this.tr.call("POST", `/v1/agents/${seg(name)}/runs`, { json: clean({ input }) }); }
  async runs(name: string, o: { state?: string; limit?: number } = {}): Promise<T.AgentRun[]> {
    return (await this.tr.call<{ runs?: T.AgentRun[] }>("GET", `/v1/agents/${seg(name)}/runs`, { query: o, idempotent: true })).runs ?? [];
  }
  webhook(name: string, payload: unknown): Promise<T.AgentWebhookResponse> { return this.tr.call("POST", `/v1/agents/${seg(name)}/webhook`, { json: payload }); }
  getRun(id: string): Promise<T.AgentRun> { return this.tr.call("GET", `/v1/agent-runs/${seg(id)}`, { idempotent: true }); }
  /** Polls a run until it has ended (succeeded, failed, timed_out or cancelled) and returns it. */
  async waitRun(id: string, o: { timeoutMs?: number; pollMs?: number; signal?: AbortSignal } = {}): Promise<T.AgentRun> {
    const deadline = Date.now() + (o.timeoutMs ?? 600_000);
    for (;;) {
      const r = await this.getRun(id);
      if (RUN_ENDED.has(r.state)) return r;
      if (Date.now() >= deadline) throw new WardenError(`agent run ${id} still ${r.state} after ${o.timeoutMs ?? 600_000} ms`);
      await new Promise<void>((resolve, reject) => {
        if (o.signal?.aborted) return reject(o.signal.reason);
        const t = setTimeout(resolve, o.pollMs ?? 500);
        o.signal?.addEventListener("abort", () => { clearTimeout(t); reject(o.signal?.reason); }, { once: true });
      });
    }
  }
  /** A run's log lines; with follow, until the run ends. */
  async *runLogs(id: string, o: { follow?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<T.AgentLogLine> {
    yield* ndjson<T.AgentLogLine>(await this.tr.request("GET", `/v1/agent-runs/${seg(id)}/logs`, { query: { follow: o.follow },
      accept: "application/x-ndjson", idempotent: true, stream: true, signal: o.signal }));
  }
  cancelRun(id: string): Promise<T.AgentRun> { return this.tr.call("POST", `/v1/agent-runs/${seg(id)}/cancel`); }
  /** Posts text in the Slack thread that started the run (while it runs). */
  reply(runId: string, text: string): Promise<T.ReplyAgentRunResponse> { return this.tr.call("POST", `/v1/agent-runs/${seg(runId)}/reply`, { json: { text } }); }
  /**
   * Relays a Slack Events API request, raw body and Slack's signature headers untouched, to
   * the agent's Slack endpoint (no API key is sent: the daemon checks Slack's signature).
   */
  forwardSlackEvent(name: string, body: string | Uint8Array, headers: Record<string, string>): Promise<T.AgentSlackEventsResponse> {
    return this.tr.call("POST", `/v1/agents/${seg(name)}/slack/events`, { body, contentType: "application/json", headers, anonymous: true });
  }
  async memory(name: string, o: { prefix?: string; tag?: string; q?: string; limit?: number } = {}): Promise<T.MemoryEntry[]> {
    return (await this.tr.call<{ entries?: T.MemoryEntry[] }>("GET", `/v1/agents/${seg(name)}/memory`, { query: o, idempotent: true })).entries ?? [];
  }
  memoryEntry(name: string, key: string): Promise<T.GetMemoryResponse> { return this.tr.call("GET", `/v1/agents/${seg(name)}/memory/entry`, { query: { key }, idempotent: true }); }
  memoryDiff(name: string, key: string, o: { from?: number; to?: number } = {}): Promise<T.MemoryDiff> {
    return this.tr.call("GET", `/v1/agents/${seg(name)}/memory/diff`, { query: { key, ...o }, idempotent: true });
  }
  async *memoryExport(name: string): AsyncGenerator<T.MemoryEntry> {
    yield* ndjson<T.MemoryEntry>(await this.tr.request("GET", `/v1/agents/${seg(name)}/memory/export`, { accept: "application/x-ndjson", idempotent: true, stream: true }));
  }
  memoryRedact(name: string, req: T.RedactMemoryRequest): Promise<T.RedactMemoryResponse> { return this.tr.call("POST", `/v1/agents/${seg(name)}/memory/redact`, { json: req }); }
}
op("createAgent", "listAgents", "getAgent", "updateAgent", "deleteAgent", "listAgentVersions", "runAgent", "listAgentRuns", "agentWebhook",
  "getAgentRun", "getAgentRunLogs", "cancelAgentRun", "replyAgentRun", "agentSlackEvents", "listMemory", "getMemory", "diffMemory", "exportMemory", "redactMemory");

/** Persistent volumes, mountable into sandboxes. */
export class Volumes {
  constructor(private tr: Transport) {}
  create(spec: T.VolumeCreate): Promise<T.Volume> { return this.tr.call("POST", "/v1/volumes", { json: spec }); }
  async list(): Promise<T.Volume[]> { return (await this.tr.call<{ volumes?: T.Volume[] }>("GET", "/v1/volumes", { idempotent: true })).volumes ?? []; }
  get(name: string): Promise<T.Volume> { return this.tr.call("GET", `/v1/volumes/${seg(name)}`, { idempotent: true }); }
  async delete(name: string): Promise<void> { await this.tr.call("DELETE", `/v1/volumes/${seg(name)}`, { idempotent: true }); }
  resize(name: string, req: T.VolumeResize): Promise<T.Volume> { return this.tr.call("POST", `/v1/volumes/${seg(name)}/resize`, { json: req }); }
  /** A file of the volume as a stream (Response body). */
  open(name: string, path: string): Promise<Response> {
    return this.tr.request("GET", `/v1/volumes/${seg(name)}/files`, { query: { path }, accept: "application/octet-stream", idempotent: true, stream: true });
  }
  write(name: string, path: string, data: Body, o: { mode?: number } = {}): Promise<T.WriteVolumeFileResponse> {
    return this.tr.call("PUT", `/v1/volumes/${seg(name)}/files`, { query: { path, mode: o.mode === undefined ? undefined : o.mode.toString(8).padStart(4, "0") },
      body: data, contentType: "application/octet-stream", idempotent: true, stream: true });
  }
  /**
   * Takes a point-in-time copy of volume `name`, mounted by a sandbox or not (a mounted one is
   * frozen for the copy), named `snapshot` (default `snap-<time>`).
   */
  snapshot(name: string, snapshot?: string): Promise<T.VolumeSnapshot> {
    return this.tr.call("POST", `/v1/volumes/${seg(name)}/snapshots`, { json: clean({ name: snapshot }) });
  }
  /** The volume's snapshots, oldest first. */
  async snapshots(name: string): Promise<T.VolumeSnapshot[]> {
    return (await this.tr.call<T.ListVolumeSnapshotsResponse>("GET", `/v1/volumes/${seg(name)}/snapshots`, { idempotent: true })).snapshots ?? [];
  }
  async deleteSnapshot(name: string, snapshot: string): Promise<void> {
    await this.tr.call("DELETE", `/v1/volumes/${seg(name)}/snapshots/${seg(snapshot)}`, { idempotent: true });
  }
  /**
   * Replaces the volume's files with those of one of its snapshots, atomically; refused
   * (ConflictError) while a live sandbox mounts the volume.
   */
  restore(name: string, snapshot: string): Promise<T.Volume> {
    return this.tr.call("POST", `/v1/volumes/${seg(name)}/restore`, { json: { snapshot }, idempotent: true });
  }
  /**
   * Makes volume `name` holding the files of `snapshot` of your volume `volume`, of the
   * snapshot's size (shorthand for create with `from_snapshot`).
   */
  createFromSnapshot(name: string, volume: string, snapshot: string): Promise<T.Volume> {
    return this.create({ name, from_snapshot: { volume, snapshot } });
  }
}
op("createVolume", "listVolumes", "getVolume", "deleteVolume", "resizeVolume", "readVolumeFile", "writeVolumeFile",
  "createVolumeSnapshot", "listVolumeSnapshots", "deleteVolumeSnapshot", "restoreVolume");

/**
 * Outgoing webhooks: endpoints that receive the audit events they name, signed in the
 * Standard Webhooks format (scope webhooks:admin).
 */
export class Webhooks {
  constructor(private tr: Transport) {}
  /** The endpoints (the config file's first, then the API's) with their delivery state. */
  async list(): Promise<T.Webhook[]> { return (await this.tr.call<T.ListWebhooksResponse>("GET", "/v1/webhooks", { idempotent: true })).webhooks ?? []; }
  get(name: string): Promise<T.Webhook> { return this.tr.call("GET", `/v1/webhooks/${seg(name)}`, { idempotent: true }); }
  /** Adds an endpoint; it gets the events written from now on. */
  create(def: T.WebhookWrite): Promise<T.Webhook> { return this.tr.call("POST", "/v1/webhooks", { json: def }); }
  /** Replaces an API-made endpoint's definition; it keeps its place in the log. */
  update(name: string, def: T.WebhookWrite): Promise<T.Webhook> { return this.tr.call("PUT", `/v1/webhooks/${seg(name)}`, { json: def, idempotent: true }); }
  /** Stops and removes an API-made endpoint. */
  async delete(name: string): Promise<void> { await this.tr.call("DELETE", `/v1/webhooks/${seg(name)}`, { idempotent: true }); }
  /** Sends a signed `webhook.test` ping now; a receiver's refusal is `ok: false`, not an error. */
  test(name: string): Promise<T.WebhookTestResult> { return this.tr.call("POST", `/v1/webhooks/${seg(name)}/test`); }
}
op("listWebhooks", "getWebhook", "createWebhook", "updateWebhook", "deleteWebhook", "testWebhook");

/** Request middleware of the guard. */
export class Middleware {
  constructor(private tr: Transport) {}
  async list(): Promise<T.Middleware[]> { return (await this.tr.call<{ middleware?: T.Middleware[] }>("GET", "/v1/middleware", { idempotent: true })).middleware ?? []; }
  get(name: string): Promise<T.Middleware> { return this.tr.call("GET", `/v1/middleware/${seg(name)}`, { idempotent: true }); }
  put(name: string, spec: T.MiddlewareWrite): Promise<T.Middleware> { return this.tr.call("PUT", `/v1/middleware/${seg(name)}`, { json: spec, idempotent: true }); }
  async delete(name: string): Promise<void> { await this.tr.call("DELETE", `/v1/middleware/${seg(name)}`, { idempotent: true }); }
  test(req: T.MiddlewareTestRequest): Promise<T.MiddlewareVerdict> { return this.tr.call("POST", "/v1/middleware/test", { json: req, idempotent: true }); }
}
op("listMiddleware", "getMiddleware", "putMiddleware", "deleteMiddleware", "testMiddleware");

/** The agent monitor: ingested agent events. */
export class Monitor {
  constructor(private tr: Transport) {}
  ingest(req: T.MonitorIngestRequest): Promise<T.MonitorIngestResult> { return this.tr.call("POST", "/v1/monitor/events", { json: req }); }
  /** One page of events; filters: agent, principal, sandbox, session, kind, since, until, cursor, limit, wait. */
  events(query: Query = {}): Promise<T.MonitorList> { return this.tr.call("GET", "/v1/monitor/events", { query, idempotent: true }); }
  get(id: string): Promise<T.MonitorEvent> { return this.tr.call("GET", `/v1/monitor/events/${seg(id)}`, { idempotent: true }); }
  redact(id: string): Promise<T.MonitorEvent> { return this.tr.call("POST", `/v1/monitor/events/${seg(id)}/redact`, { idempotent: true }); }
  claudeCodeHook(payload: T.ClaudeCodeHookInput): Promise<T.ClaudeCodeHookOutput> { return this.tr.call("POST", "/v1/monitor/hooks/claude-code", { json: payload }); }
}
op("ingestMonitorEvents", "listMonitorEvents", "getMonitorEvent", "redactMonitorEvent", "claudeCodeHook");

/** The LLM gateway's prices and budgets. */
export class LLM {
  constructor(private tr: Transport) {}
  prices(): Promise<T.LLMPrices> { return this.tr.call("GET", "/v1/llm/prices", { idempotent: true }); }
  setPrices(p: T.LLMPrices): Promise<T.LLMPrices> { return this.tr.call("PUT", "/v1/llm/prices", { json: p, idempotent: true }); }
  resetPrices(): Promise<T.LLMPrices> { return this.tr.call("DELETE", "/v1/llm/prices", { idempotent: true }); }
  budgets(): Promise<T.LLMBudgets> { return this.tr.call("GET", "/v1/llm/budgets", { idempotent: true }); }
  setBudgets(b: T.LLMBudgets): Promise<T.LLMBudgets> { return this.tr.call("PUT", "/v1/llm/budgets", { json: b, idempotent: true }); }
  resetBudgets(): Promise<T.LLMBudgets> { return this.tr.call("DELETE", "/v1/llm/budgets", { idempotent: true }); }
}
op("getLLMPrices", "setLLMPrices", "resetLLMPrices", "getLLMBudgets", "setLLMBudgets", "resetLLMBudgets");

/** Filesystem snapshots of sandboxes: list, get, delete, promote to a template. */
export class Snapshots {
  constructor(private tr: Transport) {}
  /** Your snapshots, oldest first (`sandbox`: those of one sandbox). */
  async list(o: { sandbox?: string } = {}): Promise<T.Snapshot[]> {
    return (await this.tr.call<{ snapshots?: T.Snapshot[] }>("GET", "/v1/snapshots", { query: o, idempotent: true })).snapshots ?? [];
  }
  get(name: string): Promise<T.Snapshot> { return this.tr.call("GET", `/v1/snapshots/${seg(name)}`, { idempotent: true }); }
  async delete(name: string): Promise<void> { await this.tr.call("DELETE", `/v1/snapshots/${seg(name)}`, { idempotent: true }); }
  /** Makes (or re-points) template `name[:tag]` at the snapshot. */
  promote(name: string, template: string): Promise<T.Template> {
    return this.tr.call("POST", `/v1/snapshots/${seg(name)}/promote`, { json: { template } });
  }
}
op("listSnapshots", "getSnapshot", "deleteSnapshot", "promoteSnapshot");

// ------------------------------------------------------------------ client

/**
 * A client of one Warden daemon. Options default to $WARDEN_URL and $WARDEN_API_KEY (in
 * Node), then http://127.0.0.1:7070. Idempotent calls are retried on 429 and 503.
 */
export class Warden {
  readonly transport: Transport;
  readonly sandboxes: Sandboxes;
  readonly templates: Templates;
  readonly secrets: Secrets;
  readonly keys: Keys;
  readonly principals: Principals;
  readonly audit: Audit;
  readonly policies: Policies;
  readonly approvals: Approvals;
  readonly mcp: MCP;
  readonly agents: Agents;
  readonly volumes: Volumes;
  readonly middleware: Middleware;
  readonly monitor: Monitor;
  readonly llm: LLM;
  readonly snapshots: Snapshots;
  readonly webhooks: Webhooks;

  constructor(opts: ClientOptions = {}) {
    this.transport = new Transport(opts);
    this.sandboxes = new Sandboxes(this, this.transport);
    this.templates = new Templates(this.transport);
    this.secrets = new Secrets(this.transport);
    this.keys = new Keys(this.transport);
    this.principals = new Principals(this.transport);
    this.audit = new Audit(this.transport);
    this.policies = new Policies(this.transport);
    this.approvals = new Approvals(this.transport);
    this.mcp = new MCP(this.transport);
    this.agents = new Agents(this.transport);
    this.volumes = new Volumes(this.transport);
    this.middleware = new Middleware(this.transport);
    this.monitor = new Monitor(this.transport);
    this.llm = new LLM(this.transport);
    this.snapshots = new Snapshots(this.transport);
    this.webhooks = new Webhooks(this.transport);
  }

  get baseUrl(): string { return this.transport.baseUrl; }
  health(): Promise<T.Health> { return this.transport.call("GET", "/healthz", { idempotent: true }); }
  whoami(): Promise<T.Whoami> { return this.transport.call("GET", "/v1/whoami", { idempotent: true }); }
  /** The Prometheus metrics as text (scope metrics:read). */
  async metrics(): Promise<string> { return (await this.transport.request("GET", "/metrics", { accept: "text/plain", idempotent: true })).text(); }
  /** The daemon's OpenAPI document as YAML text. */
  async openapi(): Promise<string> { return (await this.transport.request("GET", "/v1/openapi.yaml", { accept: "application/yaml", idempotent: true })).text(); }
  /** The usage report (sandbox resources and LLM tokens). */
  usage(o: { groupBy?: string; since?: string; until?: string; principal?: string; agent?: string } = {}): Promise<T.UsageReport> {
    return this.transport.call("GET", "/v1/usage", { query: { group_by: o.groupBy, since: o.since, until: o.until, principal: o.principal, agent: o.agent }, idempotent: true });
  }
  /** Opens a presigned read URL (no API key is sent). */
  readPresigned(url: string): Promise<Response> {
    return this.transport.request("GET", url, { accept: "*/*", anonymous: true, idempotent: true, stream: true });
  }
  /** Uploads data (streamed) to a presigned write URL (no API key is sent). */
  writePresigned(url: string, data: Body): Promise<T.Entry> {
    return this.transport.call("PUT", url, { body: data, contentType: "application/octet-stream", anonymous: true, idempotent: true, stream: true });
  }
}
op("getUsage", "getHealth", "whoami", "getMetrics", "getOpenAPI", "readPresignedFile", "writePresignedFile");
