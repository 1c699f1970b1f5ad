#!/usr/bin/env python3
"""coworker: Warden's reference hosted agent (docs/agents.md).

A small agent loop, Python 3 standard library only. It asks a model through
Warden's LLM gateway (OpenAI-compatible chat completions with tools), runs
the tool calls through Warden's MCP gateway (the run's virtual MCP server:
sandbox_exec in the run's own sandbox, memory_remember and memory_recall),
and prints its final answer on stdout: the run's output, which a Slack
trigger posts in the thread of the message that started the run.

Everything it needs is in the run's environment: OPENAI_BASE_URL and
WARDEN_API_KEY (the run's own key, revoked when the run ends),
WARDEN_MCP_URL, WARDEN_SANDBOX_ID and the input file. MODEL picks the model
(default gpt-4o-mini), MAX_STEPS bounds the loop (default 8). Progress goes
to stderr (the run's log); only the answer goes to stdout.
"""

import json
import os
import sys
import urllib.error
import urllib.request

KEY = os.environ.get("WARDEN_API_KEY", "")
LLM_URL = os.environ.get("OPENAI_BASE_URL", "").rstrip("/")
MCP_URL = os.environ.get("WARDEN_MCP_URL", "")
SANDBOX = os.environ.get("WARDEN_SANDBOX_ID", "")
MODEL = os.environ.get("MODEL", "gpt-4o-mini")
MAX_STEPS = int(os.environ.get("MAX_STEPS", "8"))
TIMEOUT = 120


def log(*args):
    print("coworker:", *args, file=sys.stderr, flush=True)


class HTTPError(Exception):
    pass


def post(url, body, headers=None):
    """POSTs JSON; returns (response headers, body bytes)."""
    h = {"Content-Type": "application/json", "Authorization": "Bearer " + KEY}
    h.update(headers or {})
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=h, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
            return resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        raise HTTPError("%s: HTTP %d: %s" % (url, e.code, e.read().decode(errors="replace")[:2000])) from None


class MCP:
    """A minimal MCP client over streamable HTTP (JSON-RPC 2.0)."""

    def __init__(self, url):
        self.url = url
        self.session = None
        self.version = None
        self.next_id = 1

    def _headers(self):
        h = {"Accept": "application/json, text/event-stream"}
        if self.session:
            h["Mcp-Session-Id"] = self.session
        if self.version:
            h["MCP-Protocol-Version"] = self.version
        return h

    def _send(self, method, params=None, notify=False):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if not notify:
            msg["id"] = self.next_id
            self.next_id += 1
        headers, body = post(self.url, msg, self._headers())
        if headers.get("Mcp-Session-Id"):
            self.session = headers.get("Mcp-Session-Id")
        if notify:
            return None
        for reply in self._messages(headers.get("Content-Type", ""), body):
            if reply.get("id") == msg["id"]:
                if "error" in reply:
                    raise RuntimeError("mcp %s: %s" % (method, reply["error"].get("message")))
                return reply.get("result", {})
        raise RuntimeError("mcp %s: no answer" % method)

    @staticmethod
    def _messages(ctype, body):
        text = body.decode()
        if ctype.startswith("text/event-stream"):
            data = []
            for line in text.splitlines() + [""]:
                if line.startswith("data:"):
                    data.append(line[5:].strip())
                elif line == "" and data:
                    yield json.loads("\n".join(data))
                    data = []
        elif text.strip():
            v = json.loads(text)
            yield from (v if isinstance(v, list) else [v])

    def initialize(self):
        res = self._send("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                        "clientInfo": {"name": "warden-coworker", "version": "1"}})
        self.version = res.get("protocolVersion")
        self._send("notifications/initialized", notify=True)

    def tools(self):
        return self._send("tools/list", {}).get("tools", [])

    def call(self, name, args):
        res = self._send("tools/call", {"name": name, "arguments": args})
        text = "\n".join(c.get("text", "") for c in res.get("content", []) if c.get("type") == "text")
        if res.get("isError"):
            return "error: " + text
        return text


def read_input():
    path = os.environ.get("WARDEN_RUN_INPUT_FILE")
    raw = None
    if path and os.path.exists(path):
        with open(path) as f:
            raw = f.read()
    else:
        raw = os.environ.get("WARDEN_RUN_INPUT", "null")
    v = json.loads(raw or "null")
    if isinstance(v, dict):
        return v.get("text") or v.get("prompt") or json.dumps(v)
    if isinstance(v, str):
        return v
    return json.dumps(v)


def main():
    if not (KEY and LLM_URL):
        log("no OPENAI_BASE_URL or WARDEN_API_KEY: is the daemon's LLM gateway configured?")
        return 2
    question = read_input()
    mcp, tools = None, []
    if MCP_URL:
        mcp = MCP(MCP_URL)
        mcp.initialize()
        for t in mcp.tools():
            tools.append({"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                           "parameters": t.get("inputSchema") or {"type": "object"}}})
        log("tools:", ", ".join(t["function"]["name"] for t in tools))
    messages = [
        {"role": "system", "content": "You are a helpful coworker. Your sandbox id is %s: run commands there "
                                      "with sandbox_exec. Use memory_remember to keep what is worth knowing later and "
                                      "memory_recall before answering questions about the past. Answer briefly." % SANDBOX},
        {"role": "user", "content": question},
    ]
    for step in range(MAX_STEPS):
        body = {"model": MODEL, "messages": messages}
        if tools:
            body["tools"] = tools
        _, raw = post(LLM_URL + "/chat/completions", body)
        msg = json.loads(raw)["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
        if not calls:
            print((msg.get("content") or "").strip())
            return 0
        messages.append({"role": "assistant", "content": msg.get("content"), "tool_calls": calls})
        for c in calls:
            fn = c["function"]
            args = json.loads(fn.get("arguments") or "{}")
            if fn["name"].startswith("sandbox_") and "sandbox_id" not in args and SANDBOX:
                args["sandbox_id"] = SANDBOX  # this run's own sandbox
            log("step %d: %s %s" % (step + 1, fn["name"], json.dumps(args)))
            out = mcp.call(fn["name"], args) if mcp else "error: no MCP server"
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": out})
    log("gave up after %d steps" % MAX_STEPS)
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (HTTPError, RuntimeError, OSError, ValueError, KeyError) as e:
        log("failed:", e)
        sys.exit(1)
