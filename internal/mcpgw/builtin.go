package mcpgw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/store"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// The builtin connector: Warden's own sandbox tools, so any MCP client can
// drive sandboxes through the gateway. Each tool is a call of the native
// API, made in process with the calling request's own Authorization: the
// same principal, so the API's scopes, ownership checks, governed path
// (exec, file.write, ... each decided and audited as an api action) and
// audit apply exactly as they do to the principal's direct calls.

// maxBuiltinOutput bounds what a builtin tool returns of a command's
// output or a file.
const maxBuiltinOutput = 1 << 20

type builtinTool struct {
	tool *mcp.Tool
	run  func(ctx context.Context, c *warden.Client, args map[string]any) (*mcp.CallToolResult, error)
}

func schema(props map[string]any, required ...string) json.RawMessage {
	m := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		m["required"] = required
	}
	b, _ := json.Marshal(m)
	return b
}

var (
	strProp     = func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	intProp     = func(desc string) map[string]any { return map[string]any{"type": "integer", "description": desc} }
	sbProp      = strProp("The sandbox's id.")
	readOnly    = &mcp.ToolAnnotations{ReadOnlyHint: true}
	destructive = func(b bool) *mcp.ToolAnnotations { return &mcp.ToolAnnotations{DestructiveHint: &b} }
)

var builtinTools = []builtinTool{
	{&mcp.Tool{Name: "sandbox_create", Description: "Create a Warden sandbox and return its id.",
		InputSchema: schema(map[string]any{"template": strProp("Template (default: base)."), "name": strProp("Optional name."),
			"timeout_seconds": intProp("Seconds until the sandbox is killed (default: the daemon's).")}),
		Annotations: destructive(false)}, builtinCreate},
	{&mcp.Tool{Name: "sandbox_list", Description: "List your running and paused sandboxes.",
		InputSchema: schema(map[string]any{}), Annotations: readOnly}, builtinList},
	{&mcp.Tool{Name: "sandbox_exec", Description: "Run a shell command (bash -lc) in a sandbox; returns its exit code, stdout and stderr.",
		InputSchema: schema(map[string]any{"sandbox_id": sbProp, "command": strProp("The shell command."),
			"cwd": strProp("Working directory."), "timeout_seconds": intProp("Kill the command after this long.")}, "sandbox_id", "command")}, builtinExec},
	{&mcp.Tool{Name: "sandbox_run_code", Description: "Run code in a sandbox's code interpreter (python by default); returns its results, output and error.",
		InputSchema: schema(map[string]any{"sandbox_id": sbProp, "code": strProp("The code."),
			"language": strProp("python (default), javascript, bash ...")}, "sandbox_id", "code")}, builtinRunCode},
	{&mcp.Tool{Name: "sandbox_read_file", Description: "Read a file of a sandbox (as text, at most 1 MiB).",
		InputSchema: schema(map[string]any{"sandbox_id": sbProp, "path": strProp("Absolute path.")}, "sandbox_id", "path"),
		Annotations: readOnly}, builtinReadFile},
	{&mcp.Tool{Name: "sandbox_write_file", Description: "Write a text file in a sandbox (replacing it).",
		InputSchema: schema(map[string]any{"sandbox_id": sbProp, "path": strProp("Absolute path."), "content": strProp("The file's content.")},
			"sandbox_id", "path", "content")}, builtinWriteFile},
	{&mcp.Tool{Name: "sandbox_kill", Description: "Kill a sandbox.",
		InputSchema: schema(map[string]any{"sandbox_id": sbProp}, "sandbox_id"), Annotations: destructive(true)}, builtinKill},
}

func builtinToolNames() []string {
	out := make([]string, len(builtinTools))
	for i, t := range builtinTools {
		out[i] = t.tool.Name
	}
	return out
}

func isBuiltinTool(name string) bool { return slices.Contains(builtinToolNames(), name) }

var builtinDefs = sync.OnceValues(func() ([]liveTool, error) {
	out := make([]liveTool, len(builtinTools))
	for i, t := range builtinTools {
		def, hash, err := ToolDefinition(t.tool)
		if err != nil {
			return nil, err
		}
		out[i] = liveTool{tool: t.tool, def: def, hash: hash}
	}
	return out, nil
})

// builtinCatalog is the builtin connector's tools, limited by its spec.
func builtinCatalog(conn store.MCPConnector) ([]liveTool, error) {
	all, err := builtinDefs()
	if err != nil {
		return nil, err
	}
	spec, err := ParseConnectorSpec(conn.Kind, conn.Spec)
	if err != nil {
		return nil, err
	}
	allow := spec.(*BuiltinSpec).Tools
	var out []liveTool
	for _, t := range all {
		if len(allow) == 0 && !isMemoryTool(t.tool.Name) || slices.Contains(allow, t.tool.Name) {
			out = append(out, t)
		}
	}
	return out, nil
}

// callBuiltin runs a builtin tool as the caller.
func (g *Gateway) callBuiltin(ctx context.Context, c *caller, name string, args map[string]any) (*mcp.CallToolResult, error) {
	if isMemoryTool(name) {
		return g.callMemory(ctx, c, name, args)
	}
	if g.cfg.API == nil {
		return nil, errors.New("the builtin connector is not available on this daemon")
	}
	i := slices.IndexFunc(builtinTools, func(t builtinTool) bool { return t.tool.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("no builtin tool %q", name)
	}
	if c.authorization == "" {
		return nil, errors.New("no credential to act with")
	}
	wc, err := warden.New(warden.WithBaseURL("http://wardend.internal"), warden.WithAPIKey(""),
		warden.WithRetry(warden.RetryPolicy{MaxAttempts: 1}),
		warden.WithHTTPClient(&http.Client{Transport: &handlerTransport{h: g.cfg.API, authorization: c.authorization}}))
	if err != nil {
		return nil, err
	}
	res, err := builtinTools[i].run(ctx, wc, args)
	if err != nil {
		// The API's refusal (forbidden, not found, denied by policy) is
		// the tool's error, for the model to read.
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
	}
	return res, nil
}

func argString(args map[string]any, k string) string {
	s, _ := args[k].(string)
	return s
}

func argInt(args map[string]any, k string) int {
	switch v := args[k].(type) {
	case float64:
		return int(v)
	case json.Number:
		n, _ := v.Int64()
		return int(n)
	}
	return 0
}

func textResult(v any) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}, nil
}

func needArgs(args map[string]any, keys ...string) error {
	for _, k := range keys {
		if argString(args, k) == "" {
			return fmt.Errorf("%s is required", k)
		}
	}
	return nil
}

func builtinCreate(ctx context.Context, c *warden.Client, args map[string]any) (*mcp.CallToolResult, error) {
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Template: argString(args, "template"), Name: argString(args, "name"),
		TimeoutSeconds: argInt(args, "timeout_seconds")})
	if err != nil {
		return nil, err
	}
	return textResult(map[string]any{"sandbox_id": sb.ID, "name": sb.Name, "template": sb.Template, "state": sb.State})
}

func builtinList(ctx context.Context, c *warden.Client, _ map[string]any) (*mcp.CallToolResult, error) {
	page, err := c.ListSandboxes(ctx, warden.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, sb := range page.Sandboxes {
		out = append(out, map[string]any{"sandbox_id": sb.ID, "name": sb.Name, "template": sb.Template, "state": sb.State})
	}
	return textResult(map[string]any{"sandboxes": out})
}

// capWriter keeps the first max bytes written to it.
type capWriter struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); room < len(p) {
		w.truncated = true
		if room > 0 {
			w.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return w.buf.Write(p)
}

func builtinExec(ctx context.Context, c *warden.Client, args map[string]any) (*mcp.CallToolResult, error) {
	if err := needArgs(args, "sandbox_id", "command"); err != nil {
		return nil, err
	}
	stdout, stderr := &capWriter{max: maxBuiltinOutput / 2}, &capWriter{max: maxBuiltinOutput / 2}
	res, err := c.Exec(ctx, argString(args, "sandbox_id"), warden.ExecRequest{Command: argString(args, "command"),
		Cwd: argString(args, "cwd"), TimeoutSeconds: argInt(args, "timeout_seconds")}, warden.ExecIO{Stdout: stdout, Stderr: stderr})
	if err != nil {
		return nil, err
	}
	r, err := textResult(map[string]any{"exit_code": res.ExitCode, "stdout": stdout.buf.String(), "stderr": stderr.buf.String(),
		"truncated": stdout.truncated || stderr.truncated, "error": res.Error})
	if r != nil {
		r.IsError = !res.Success()
	}
	return r, err
}

func builtinRunCode(ctx context.Context, c *warden.Client, args map[string]any) (*mcp.CallToolResult, error) {
	if err := needArgs(args, "sandbox_id", "code"); err != nil {
		return nil, err
	}
	ex, err := c.RunCode(ctx, argString(args, "sandbox_id"), warden.RunCodeRequest{Code: argString(args, "code"),
		Language: argString(args, "language")}, warden.CodeHandlers{})
	if err != nil {
		return nil, err
	}
	out := map[string]any{"text": ex.Text(), "stdout": strings.Join(ex.Logs.Stdout, ""), "stderr": strings.Join(ex.Logs.Stderr, "")}
	if ex.Error != nil {
		out["error"] = map[string]any{"name": ex.Error.Name, "value": ex.Error.Value, "traceback": ex.Error.Traceback}
	}
	r, err := textResult(out)
	if r != nil {
		r.IsError = ex.Error != nil
	}
	return r, err
}

func builtinReadFile(ctx context.Context, c *warden.Client, args map[string]any) (*mcp.CallToolResult, error) {
	if err := needArgs(args, "sandbox_id", "path"); err != nil {
		return nil, err
	}
	rc, err := c.ReadFile(ctx, argString(args, "sandbox_id"), argString(args, "path"), warden.ReadOptions{})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxBuiltinOutput+1))
	if err != nil {
		return nil, err
	}
	truncated := len(b) > maxBuiltinOutput
	if truncated {
		b = b[:maxBuiltinOutput]
	}
	return textResult(map[string]any{"content": string(b), "truncated": truncated})
}

func builtinWriteFile(ctx context.Context, c *warden.Client, args map[string]any) (*mcp.CallToolResult, error) {
	if err := needArgs(args, "sandbox_id", "path"); err != nil {
		return nil, err
	}
	content := argString(args, "content")
	e, err := c.WriteFile(ctx, argString(args, "sandbox_id"), argString(args, "path"), strings.NewReader(content), warden.WriteOptions{})
	if err != nil {
		return nil, err
	}
	return textResult(map[string]any{"path": e.Path, "size": len(content)})
}

func builtinKill(ctx context.Context, c *warden.Client, args map[string]any) (*mcp.CallToolResult, error) {
	if err := needArgs(args, "sandbox_id"); err != nil {
		return nil, err
	}
	if err := c.KillSandbox(ctx, argString(args, "sandbox_id")); err != nil {
		return nil, err
	}
	return textResult(map[string]any{"killed": argString(args, "sandbox_id")})
}

// handlerTransport serves an http.Client's requests with a handler in
// process, streaming the response body, with the caller's Authorization.
type handlerTransport struct {
	h             http.Handler
	authorization string
}

func (t *handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", t.authorization)
	r.RequestURI = req.URL.RequestURI()
	r.RemoteAddr = "127.0.0.1:0"
	r.Host = req.URL.Host
	if r.Body == nil {
		r.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			w.WriteHeader(http.StatusOK)
			pw.Close()
		}()
		t.h.ServeHTTP(w, r)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: w.sent, Body: pr, ContentLength: -1, Request: req}, nil
}

// pipeResponse is the handler's side of handlerTransport.
type pipeResponse struct {
	header http.Header
	sent   http.Header
	status int
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
}

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(code int) {
	w.once.Do(func() {
		w.status = code
		w.sent = w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(p)
}

func (w *pipeResponse) Flush() {}
