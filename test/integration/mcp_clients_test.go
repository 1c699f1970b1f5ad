package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// Real MCP clients and a real npm MCP server through the real daemon
// (issue 20): the npm @modelcontextprotocol/sdk client lists and calls a
// granted tool of a Go upstream through /mcp/v/{server} with a Warden key;
// the npm server @modelcontextprotocol/server-memory, installed on the
// host and built into a template (the sandbox has no egress, so nothing
// is fetched there), runs as a hosted connector inside a sandbox and is
// driven by the go-sdk client through the gateway; its sandbox is killed
// and the next call works on a restarted one.

// Pinned npm versions.
const (
	npmMCPSDK       = "@modelcontextprotocol/sdk@1.32.2"
	npmMemoryServer = "@modelcontextprotocol/server-memory@2026.8.31"
)

// npmWork installs pkgs into a new npm project and returns its directory
// and node's path. Missing node or npm fails the test
// (scripts/install-deps.sh installs them).
func npmWork(t *testing.T, pkgs ...string) (work, node string) {
	t.Helper()
	node, errNode := exec.LookPath("node")
	npm, errNpm := exec.LookPath("npm")
	if errNode != nil || errNpm != nil {
		t.Fatalf("node or npm is not installed (%v, %v); scripts/install-deps.sh installs them", errNode, errNpm)
	}
	// One install serves every test of the run that needs no more
	// packages than it has (an install takes tens of seconds); tests write
	// their scripts under their own names. TestMain removes the dirs.
	npmDirs.Lock()
	defer npmDirs.Unlock()
	for _, d := range npmDirs.dirs {
		if !slices.ContainsFunc(pkgs, func(p string) bool { return !slices.Contains(d.pkgs, p) }) {
			return d.dir, node
		}
	}
	work, err := os.MkdirTemp("", "warden-it-mcp-npm-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(work, 0o755)
	if err := os.WriteFile(filepath.Join(work, "package.json"), []byte(`{"name":"warden-it-mcp","private":true,"type":"module"}`), 0o644); err != nil {
		os.RemoveAll(work)
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	inst := exec.CommandContext(ctx, npm, append([]string{"install", "--no-audit", "--no-fund", "--loglevel=error"}, pkgs...)...)
	inst.Dir = work
	if out, err := inst.CombinedOutput(); err != nil {
		os.RemoveAll(work)
		t.Fatalf("npm install %v: %v\n%s", pkgs, err, out)
	}
	npmDirs.dirs = append(npmDirs.dirs, npmDir{dir: work, pkgs: pkgs})
	return work, node
}

// npmDirs are npmWork's installs, kept for the whole run.
var npmDirs struct {
	sync.Mutex
	dirs []npmDir
}

type npmDir struct {
	dir  string
	pkgs []string
}

// npmClientScript lists the tools of a virtual server and calls one with
// the npm SDK's streamable-HTTP client, printing one JSON line.
const npmClientScript = `
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
const [url, key, tool, args] = process.argv.slice(2);
const client = new Client({ name: "warden-it-npm", version: "1" });
const transport = new StreamableHTTPClientTransport(new URL(url),
  { requestInit: { headers: { Authorization: "Bearer " + key } } });
await client.connect(transport);
const tools = (await client.listTools()).tools.map((t) => t.name).sort();
const res = await client.callTool({ name: tool, arguments: JSON.parse(args) });
const text = res.content.filter((c) => c.type === "text").map((c) => c.text).join("");
console.log(JSON.stringify({ tools, text, isError: !!res.isError, protocol: transport.protocolVersion ?? "" }));
await client.close();
`

// contextTarOf returns a build context holding the Dockerfile and the
// regular files and directories under dir/sub (symlinks, such as
// node_modules/.bin, are left out).
func contextTarOf(t *testing.T, dockerfile, dir, sub string) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), Typeflag: tar.TypeReg})
	tw.Write([]byte(dockerfile))
	err := filepath.Walk(filepath.Join(dir, sub), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tw.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	return &buf
}

// approvePending approves every pending tool definition of a connector.
func approvePending(t *testing.T, d *daemon, connector string) []string {
	t.Helper()
	var pending struct {
		Tools []struct{ Connector, Tool, Hash string } `json:"tools"`
	}
	json.Unmarshal(adminCall(t, d, d.adminKey, "GET", "/v1/mcp/tools?state=pending", nil), &pending)
	var names []string
	for _, p := range pending.Tools {
		if p.Connector != connector {
			continue
		}
		adminCall(t, d, d.adminKey, "POST", fmt.Sprintf("/v1/mcp/tools/%s/%s/%s/approve", p.Connector, p.Tool, p.Hash), nil)
		names = append(names, p.Tool)
	}
	return names
}

// waitTools waits until the session lists want (the gateway re-reads
// after an approval).
func waitTools(t *testing.T, cs *mcp.ClientSession, want func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := mcpTools(t, cs)
		if want(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools = %v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestMCPGatewayRealClients(t *testing.T) {
	work, node := npmWork(t, npmMCPSDK, npmMemoryServer)
	if err := os.WriteFile(filepath.Join(work, "client.mjs"), []byte(npmClientScript), 0o644); err != nil {
		t.Fatal(err)
	}
	up := newMCPUpstream(t)
	state, run := newDirs(t)
	conf := filepath.Join(filepath.Dir(state), "wardend.yaml")
	if err := os.WriteFile(conf, []byte("mcp:\n  allow_hosts: [\"127.0.0.1\"]\n  allow_http: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, state, run, "--config", conf)
	ctx := context.Background()
	admin := d.client(t, d.adminKey)
	agent, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: "mcp-real-clients"})
	if err != nil {
		t.Fatal(err)
	}
	ak, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: agent.ID, Name: "mcp", Scopes: []string{"mcp:use"}})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("npm client", func(t *testing.T) {
		adminCall(t, d, d.adminKey, "POST", "/v1/mcp/connectors", map[string]any{"id": "goup", "kind": "remote",
			"spec": map[string]any{"url": up.hs.URL}})
		adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "npm",
			"spec": map[string]any{"connectors": []any{map[string]any{"connector": "goup"}}}})
		adminCall(t, d, d.adminKey, "PUT", "/v1/mcp/servers/npm/grants/"+agent.ID, nil)
		// The gateway reads the upstream (and records its tools pending)
		// when the server is first used.
		cs := mcpConnect(t, d, ak.Key, "npm")
		mcpTools(t, cs)
		if got := approvePending(t, d, "goup"); !slices.Equal(got, []string{"echo"}) {
			t.Fatalf("pending tools of goup: %v", got)
		}
		waitTools(t, cs, func(got []string) bool { return slices.Equal(got, []string{"echo"}) })

		runClient := func(key string) (string, error) {
			cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(cctx, node, "client.mjs", d.url+"/mcp/v/npm", key, "echo", `{"text":"from npm"}`)
			cmd.Dir = work
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				return "", fmt.Errorf("%w: %s", err, stderr.String())
			}
			return string(out), nil
		}
		out, err := runClient(ak.Key)
		if err != nil {
			t.Fatalf("npm client: %v", err)
		}
		var res struct {
			Tools    []string `json:"tools"`
			Text     string   `json:"text"`
			IsError  bool     `json:"isError"`
			Protocol string   `json:"protocol"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &res); err != nil {
			t.Fatalf("npm client output %q: %v", out, err)
		}
		if !slices.Equal(res.Tools, []string{"echo"}) || res.IsError || !strings.Contains(res.Text, "from npm") {
			t.Fatalf("npm client: %+v", res)
		}
		t.Logf("npm client (protocol %q): %+v", res.Protocol, res)
		// A key without a grant gets nothing.
		other, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: "mcp-no-grant"})
		if err != nil {
			t.Fatal(err)
		}
		ok, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: other.ID, Name: "mcp", Scopes: []string{"mcp:use"}})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := runClient(ok.Key); err == nil {
			t.Fatalf("the npm client of a principal without a grant got %s", out)
		}
	})

	t.Run("hosted npm server", func(t *testing.T) {
		bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if _, err := admin.BuildTemplate(bctx, warden.BuildRequest{Name: "mcp-memory:1"},
			contextTarOf(t, "FROM base\nCOPY node_modules/ /opt/mcp/node_modules/\n", work, "node_modules"), nil); err != nil {
			t.Fatalf("build the server's template: %v", err)
		}
		adminCall(t, d, d.adminKey, "POST", "/v1/mcp/connectors", map[string]any{"id": "memory", "kind": "hosted",
			"spec": map[string]any{"template": "mcp-memory:1",
				"command": []string{"node", "/opt/mcp/node_modules/@modelcontextprotocol/server-memory/dist/index.js"},
				"env":     map[string]string{"MEMORY_FILE_PATH": "/tmp/memory.jsonl"}}})
		adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "mem",
			"spec": map[string]any{"connectors": []any{map[string]any{"connector": "memory"}}}})
		adminCall(t, d, d.adminKey, "PUT", "/v1/mcp/servers/mem/grants/"+agent.ID, nil)
		cs := mcpConnect(t, d, ak.Key, "mem")
		if got := mcpTools(t, cs); len(got) != 0 {
			t.Fatalf("tools before approval: %v", got)
		}
		approved := approvePending(t, d, "memory")
		if !slices.Contains(approved, "create_entities") || !slices.Contains(approved, "read_graph") {
			t.Fatalf("pending tools of the memory server: %v\n%s", approved, d.log)
		}
		waitTools(t, cs, func(got []string) bool {
			return slices.Contains(got, "read_graph") && slices.Contains(got, "create_entities")
		})

		call := func(name string, args map[string]any) string {
			t.Helper()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
			if err != nil || res.IsError {
				t.Fatalf("%s: %v %s\n%s", name, err, mcpText(res), d.log)
			}
			return mcpText(res)
		}
		call("create_entities", map[string]any{"entities": []any{map[string]any{"name": "warden", "entityType": "project",
			"observations": []string{"runs hosted MCP servers"}}}})
		if got := call("read_graph", map[string]any{}); !strings.Contains(got, "runs hosted MCP servers") {
			t.Fatalf("read_graph = %q", got)
		}

		// Kill the server's sandbox: the next call runs on a new one.
		page, err := admin.ListSandboxes(ctx, warden.ListOptions{Metadata: map[string]string{"warden.mcp.hosted": "true"}})
		if err != nil {
			t.Fatal(err)
		}
		var killed []string
		for _, sb := range page.Sandboxes {
			if sb.State == "running" {
				if err := admin.KillSandbox(ctx, sb.ID); err != nil {
					t.Fatal(err)
				}
				killed = append(killed, sb.ID)
			}
		}
		if len(killed) != 1 {
			t.Fatalf("hosted sandboxes killed: %v (listed %+v)", killed, page.Sandboxes)
		}
		var got string
		deadline := time.Now().Add(60 * time.Second)
		for {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_graph", Arguments: map[string]any{}})
			if err == nil && !res.IsError {
				got = mcpText(res)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("read_graph after the kill: %v %s\n%s", err, mcpText(res), d.log)
			}
			t.Logf("read_graph after the kill (retrying): %v %s", err, mcpText(res))
			time.Sleep(time.Second)
		}
		// The new sandbox starts empty: the old one's memory file died with it.
		if strings.Contains(got, "runs hosted MCP servers") {
			t.Fatalf("read_graph after the kill still has the old graph: %q", got)
		}
		page, err = admin.ListSandboxes(ctx, warden.ListOptions{Metadata: map[string]string{"warden.mcp.hosted": "true"}})
		if err != nil {
			t.Fatal(err)
		}
		var running []string
		for _, sb := range page.Sandboxes {
			if sb.State == "running" {
				running = append(running, sb.ID)
			}
		}
		if len(running) != 1 || running[0] == killed[0] {
			t.Fatalf("hosted sandboxes running after the kill: %v (killed %v)", running, killed)
		}
	})
}
