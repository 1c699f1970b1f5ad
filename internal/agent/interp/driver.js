// Warden code-interpreter driver for JavaScript and TypeScript. The agent
// starts it as `node -e <this>` with WARDEN_LANGUAGE set; it reads one JSON
// command per line on fd 3 and writes one JSON event per line on fd 4.
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');
const util = require('util');
const Module = require('module');
const readline = require('readline');

const LANG = process.env.WARDEN_LANGUAGE || 'javascript';
delete process.env.WARDEN_LANGUAGE;
const MARK = Buffer.from('\x00\x1bwarden-sync\x00', 'latin1');

function writeAll(fd, buf) {
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(fd, buf, off, buf.length - off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
}
function send(ev) { writeAll(4, Buffer.from(JSON.stringify(ev) + '\n', 'utf8')); }

let ts = null;
function loadTS() {
  if (ts !== null) return ts;
  const dirs = [];
  if (process.env.NODE_PATH) dirs.push(...process.env.NODE_PATH.split(':'));
  dirs.push('/usr/local/lib/node_modules', '/usr/lib/node_modules',
    path.join(path.dirname(process.execPath), '..', 'lib', 'node_modules'));
  for (const d of dirs) {
    if (!d) continue;
    try { ts = require(path.join(d, 'typescript')); return ts; } catch (e) { /* next */ }
  }
  try { ts = require('typescript'); } catch (e) { ts = false; }
  return ts;
}

const out = (name) => (chunk, enc, cb) => {
  if (typeof enc === 'function') cb = enc;
  const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
  if (text) send({ type: name, text });
  if (typeof cb === 'function') cb();
  return true;
};
process.stdout.write = out('stdout');
process.stderr.write = out('stderr');
const { Writable } = require('stream');
const sink = (name) => new Writable({ decodeStrings: false, write(chunk, enc, cb) { out(name)(chunk, cb); } });
const cons = new console.Console({ stdout: sink('stdout'), stderr: sink('stderr') });

const cellRequire = Module.createRequire(path.join(process.cwd(), '[cell]'));

// ESM imports of a cell (import declarations and import() calls) go through
// wardenImport: node resolves a bare specifier of a dynamic import relative
// to this driver, so the package is found here first as require would find
// it (the cwd's node_modules up to /, NODE_PATH, the global modules), using
// the package's "import" export where it has one.
const globalDirs = () => [...(process.env.NODE_PATH || '').split(':').filter(Boolean),
  '/usr/local/lib/node_modules', '/usr/lib/node_modules',
  path.join(path.dirname(process.execPath), '..', 'lib', 'node_modules')];
function pickExport(e) {
  if (typeof e === 'string') return e;
  if (Array.isArray(e)) { for (const x of e) { const r = pickExport(x); if (r) return r; } return null; }
  if (e && typeof e === 'object') {
    for (const k of ['import', 'node', 'default', 'require']) if (e[k] !== undefined) { const r = pickExport(e[k]); if (r) return r; }
  }
  return null;
}
function resolveESM(spec) {
  const m = /^((?:@[^/]+\/)?[^/]+)(\/.*)?$/.exec(spec);
  if (!m) return null;
  const [, name, sub] = m;
  const dirs = [...(cellRequire.resolve.paths(spec) || []), ...globalDirs()];
  for (const d of dirs) {
    const dir = path.join(d, name);
    let pkg;
    try { pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')); } catch (e) { continue; }
    let target = null;
    if (pkg.exports !== undefined) {
      const ex = pkg.exports;
      const key = '.' + (sub || '');
      const entry = (typeof ex === 'object' && !Array.isArray(ex) && Object.keys(ex).some((k) => k.startsWith('.'))) ? ex[key] : (sub ? undefined : ex);
      target = pickExport(entry);
    } else if (sub) {
      target = '.' + sub;
    } else {
      target = pkg.module || pkg.main || 'index.js';
    }
    if (target) {
      let f = path.join(dir, target);
      for (const ext of ['', '.js', '.mjs', '.cjs', '/index.js']) { if (fs.existsSync(f + ext) && fs.statSync(f + ext).isFile()) { f += ext; break; } }
      return require('url').pathToFileURL(f).href;
    }
  }
  return null;
}
function wardenImport(spec) {
  spec = String(spec);
  let target = spec;
  if (!spec.startsWith('node:') && !Module.isBuiltin(spec) && !/^[a-z]+:/.test(spec)) {
    if (spec.startsWith('.') || spec.startsWith('/')) {
      target = require('url').pathToFileURL(path.resolve(process.cwd(), spec)).href;
    } else {
      target = resolveESM(spec);
      if (!target) { try { target = require('url').pathToFileURL(cellRequire.resolve(spec)).href; } catch (e) { target = spec; } }
    }
  }
  return import(target);
}
const sandbox = {
  console: cons, require: cellRequire, process, Buffer, module: { exports: {} },
  setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate,
  queueMicrotask, structuredClone, URL, URLSearchParams, TextEncoder, TextDecoder,
  AbortController, AbortSignal, atob, btoa, performance,
  __wardenImport: wardenImport,
  display: (...vals) => { for (const v of vals) send(Object.assign({ type: 'result', is_main_result: false }, bundle(v))); },
};
for (const k of ['fetch', 'Headers', 'Request', 'Response', 'FormData', 'Blob', 'crypto', 'WebSocket', 'navigator']) {
  if (globalThis[k] !== undefined) sandbox[k] = globalThis[k];
}
sandbox.exports = sandbox.module.exports;
const context = vm.createContext(sandbox);

function bundle(v) {
  const d = {};
  if (v !== null && typeof v === 'object') {
    const mime = v[Symbol.for('warden.mime')];
    if (mime && typeof mime === 'object') {
      const keys = { 'text/plain': 'text', 'text/html': 'html', 'text/markdown': 'markdown', 'image/svg+xml': 'svg', 'image/png': 'png', 'image/jpeg': 'jpeg', 'application/json': 'json', 'text/latex': 'latex' };
      for (const [k, x] of Object.entries(mime)) d[keys[k] || k] = x;
    }
  }
  if (d.text === undefined) d.text = typeof v === 'string' ? util.inspect(v) : util.inspect(v, { depth: 4 });
  return d;
}

// transform rewrites a cell so that it runs inside an async function (top
// level await) while its top-level declarations land on the context's
// global object (they persist across runs and may be declared again), and
// so that the last expression statement is returned.
function transform(code, t) {
  let sf = t.createSourceFile('cell.js', code, t.ScriptTarget.Latest, true, t.ScriptKind.JS);
  if (sf.parseDiagnostics && sf.parseDiagnostics.length) return null;
  // First import() anywhere in the cell becomes __wardenImport().
  const calls = [];
  const visit = (n) => {
    if (t.isCallExpression(n) && n.expression.kind === t.SyntaxKind.ImportKeyword) calls.push([n.expression.getStart(sf), n.expression.getEnd()]);
    t.forEachChild(n, visit);
  };
  visit(sf);
  if (calls.length) {
    for (const [a, b] of calls.sort((x, y) => y[0] - x[0])) code = code.slice(0, a) + '__wardenImport' + code.slice(b);
    sf = t.createSourceFile('cell.js', code, t.ScriptTarget.Latest, true, t.ScriptKind.JS);
    if (sf.parseDiagnostics && sf.parseDiagnostics.length) return null;
  }
  const edits = []; // [start, end, text]
  const hoist = [];
  const stmts = sf.statements;
  stmts.forEach((s, i) => {
    const start = s.getStart(sf), end = s.getEnd();
    if (t.isImportDeclaration(s)) {
      const mod = `(await __wardenImport(${s.moduleSpecifier.getText(sf)}))`;
      const c = s.importClause;
      if (!c) { edits.push([start, end, `${mod};`]); return; }
      if (c.isTypeOnly) { edits.push([start, end, '']); return; }
      const tmp = `__wardenMod${i}`;
      const parts = [`globalThis.${tmp} = ${mod};`];
      if (c.name) parts.push(`${c.name.text} = ('default' in ${tmp} ? ${tmp}.default : ${tmp});`);
      const nb = c.namedBindings;
      if (nb && t.isNamespaceImport(nb)) parts.push(`${nb.name.text} = ${tmp};`);
      if (nb && t.isNamedImports(nb)) {
        for (const el of nb.elements) {
          if (el.isTypeOnly) continue;
          const from = (el.propertyName || el.name).text;
          parts.push(`${el.name.text} = ${tmp}[${JSON.stringify(from)}];`);
        }
      }
      edits.push([start, end, parts.join(' ')]);
      return;
    }
    if (t.isVariableStatement(s)) {
      if (s.modifiers && s.modifiers.length) return;
      const parts = s.declarationList.declarations.map((d) => {
        const name = d.name.getText(sf);
        if (!d.initializer) {
          return (s.declarationList.flags & (t.NodeFlags.Let | t.NodeFlags.Const)) ? `${name} = undefined` : `void 0`;
        }
        const init = d.initializer.getText(sf);
        return t.isIdentifier(d.name) ? `${name} = (${init})` : `(${name} = (${init}))`;
      });
      edits.push([start, end, parts.join(';\n') + ';']);
    } else if (t.isFunctionDeclaration(s) && s.name) {
      hoist.push(`globalThis[${JSON.stringify(s.name.text)}] = ${s.name.text};`);
    } else if (t.isClassDeclaration(s) && s.name) {
      edits.push([start, end, `${s.name.text} = ${s.getText(sf)};`]);
    } else if (i === stmts.length - 1 && t.isExpressionStatement(s)) {
      edits.push([start, end, `return (${s.expression.getText(sf)});`]);
    }
  });
  let body = code;
  for (const [a, b, txt] of edits.sort((x, y) => y[0] - x[0])) body = body.slice(0, a) + txt + body.slice(b);
  return `(async function () {${hoist.join('')}\n${body}\n}).call(globalThis)`;
}

function prepare(code) {
  const t = loadTS();
  if (LANG === 'typescript') {
    if (!t) throw Object.assign(new Error('the typescript package is not installed (npm install -g typescript)'), { name: 'TypeScriptUnavailable' });
    const r = t.transpileModule(code, {
      reportDiagnostics: false,
      compilerOptions: { target: t.ScriptTarget.ES2022, module: t.ModuleKind.ESNext, removeComments: false, sourceMap: false },
    });
    code = r.outputText.replace(/\n?export \{\};\s*$/, '\n');
  }
  if (t) {
    const w = transform(code, t);
    if (w !== null) return { code: w, async: true };
  }
  // Without a parser: run as a script (its completion value is the result,
  // let/const persist natively), or wrapped when it uses top-level await.
  try {
    new vm.Script(code);
    return { code, async: false };
  } catch (e) {
    if (/await/.test(String(e && e.message))) return { code: `(async function () {\n${code}\n}).call(globalThis)`, async: true };
    return { code, async: false };
  }
}

let count = 0;
let interrupt = null; // rejects the awaited run on SIGINT
process.on('SIGINT', () => { if (interrupt) interrupt(); });
process.on('uncaughtException', (e) => { send({ type: 'stderr', text: 'Uncaught ' + ((e && e.stack) || String(e)) + '\n' }); });
process.on('unhandledRejection', (e) => { send({ type: 'stderr', text: 'Unhandled rejection: ' + ((e && e.stack) || String(e)) + '\n' }); });

function errorEvent(e) {
  if (e !== null && (typeof e === 'object' || typeof e === 'function')) {
    const name = e.name || (e.constructor && e.constructor.name) || 'Error';
    const value = e.message !== undefined ? String(e.message) : util.inspect(e);
    return { type: 'error', name: String(name), value, traceback: typeof e.stack === 'string' ? e.stack : `${name}: ${value}` };
  }
  return { type: 'error', name: 'Error', value: String(e), traceback: 'Uncaught ' + util.inspect(e) };
}

async function run(cmd) {
  count++;
  const saved = {};
  for (const [k, v] of Object.entries(cmd.env || {})) { saved[k] = process.env[k]; process.env[k] = v; }
  try {
    const p = prepare(cmd.code || '');
    const opts = { filename: `cell-${count}`, breakOnSigint: true };
    if (cmd.timeout_ms > 0) opts.timeout = cmd.timeout_ms;
    let v = vm.runInContext(p.code, context, opts);
    if (p.async || (v && typeof v.then === 'function')) {
      v = await new Promise((resolve, reject) => {
        interrupt = () => reject(Object.assign(new Error('Script execution interrupted.'), { name: 'Error' }));
        Promise.resolve(v).then(resolve, reject);
      });
    }
    if (v !== undefined) send(Object.assign({ type: 'result', is_main_result: true }, bundle(v)));
  } catch (e) {
    if (e && e.code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') {
      const v = `execution timed out after ${cmd.timeout_ms / 1000}s and was interrupted; the context keeps its state`;
      send({ type: 'error', name: 'TimeoutError', value: v, traceback: 'TimeoutError: ' + v });
    } else {
      send(errorEvent(e));
    }
  } finally {
    interrupt = null;
    for (const [k, v] of Object.entries(saved)) { if (v === undefined) delete process.env[k]; else process.env[k] = v; }
  }
}

const queue = [];
let busy = false;
async function pump() {
  if (busy) return;
  busy = true;
  while (queue.length) {
    const cmd = queue.shift();
    await run(cmd);
    writeAll(1, MARK);
    writeAll(2, MARK);
    send({ type: 'done', id: cmd.id });
  }
  busy = false;
  if (closed) process.exit(0);
}
const rl = readline.createInterface({ input: fs.createReadStream(null, { fd: 3 }) });
rl.on('line', (line) => {
  let cmd;
  try { cmd = JSON.parse(line); } catch (e) { return; }
  queue.push(cmd);
  pump();
});
let closed = false;
rl.on('close', () => { closed = true; if (!busy) process.exit(0); });
send({ type: 'ready', pid: process.pid });
