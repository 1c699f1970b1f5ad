package e2bsdk

// Issue 19 through the unmodified npm e2b SDK: an exec held by a
// require_approval rule, approved by another principal through Warden's
// API and then run (at both doors: the approval is of the action, not of
// the door); one rejected; one expired. And the lifecycle, network and
// preview actions: one rule refuses pause, an open network and a port path
// the same way at both doors.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// approvalREPL is a node program that creates a sandbox through the SDK and
// then runs one command per stdin line, answering one "RES ..." line each.
const approvalREPL = `
import { Sandbox } from 'e2b'
import readline from 'node:readline'
const sbx = await Sandbox.create('base', { timeoutMs: 300_000 })
console.log('RES SANDBOX ' + sbx.sandboxId)
const rl = readline.createInterface({ input: process.stdin })
for await (const line of rl) {
  const sp = line.indexOf(' ')
  const op = sp < 0 ? line : line.slice(0, sp), arg = sp < 0 ? '' : line.slice(sp + 1)
  try {
    if (op === 'run') {
      const r = await sbx.commands.run(arg)
      console.log('RES OK ' + JSON.stringify(r.stdout))
    } else if (op === 'pause') {
      await sbx.pause()
      console.log('RES OK paused')
    } else if (op === 'opennet') {
      await sbx.updateNetwork({ allowInternetAccess: true })
      console.log('RES OK network')
    } else if (op === 'port') {
      const res = await fetch(process.env.E2B_SANDBOX_URL + arg, { headers: {
        'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8080',
        'E2b-Traffic-Access-Token': sbx.trafficAccessToken ?? '', 'X-Access-Token': sbx.envdAccessToken ?? '' } })
      console.log('RES HTTP ' + res.status + ' ' + JSON.stringify(await res.text()))
    } else if (op === 'kill') {
      await sbx.kill()
      console.log('RES OK killed')
    } else {
      console.log('RES ERR unknown op')
    }
  } catch (e) {
    console.log('RES ERR ' + e.constructor.name + ' ' + JSON.stringify(e.message))
  }
}
`

var approvalPolicy = warden.PolicyWrite{ID: "approvals-e2e", Scope: warden.PolicyScope{Kind: "installation"}, Rules: []warden.Rule{
	{ID: "deploys-need-ops", Kinds: []string{"exec"}, Outcome: "require_approval", Message: "deploys need ops",
		When: `exec.shell.startsWith("echo deploy")`},
	{ID: "no-pause", Kinds: []string{"sandbox.lifecycle"}, Outcome: "deny", Message: "pausing is not allowed",
		When: `lifecycle.op == "pause"`},
	{ID: "no-open-net", Kinds: []string{"network.change"}, Outcome: "deny", Message: "no open network",
		When: `network.mode == "open"`},
	{ID: "no-admin", Kinds: []string{"port.preview"}, Outcome: "deny", Message: "the admin page is closed",
		When: `port.path.startsWith("/admin")`},
}}

// approvalTTL is the daemon's governance.approval_ttl here: the approved
// retries run well within it, the expiry case waits it out.
const approvalTTL = 25 * time.Second

var aprRE = regexp.MustCompile(`apr_[0-9a-zA-Z]+`)

// repl drives approvalREPL.
type repl struct {
	t   *testing.T
	in  io.Writer
	out *bufio.Scanner
	log *bytes.Buffer
}

func (r *repl) do(line string) string {
	r.t.Helper()
	fmt.Fprintln(r.in, line)
	return r.next(line)
}

// next reads the next answer.
func (r *repl) next(line string) string {
	r.t.Helper()
	for r.out.Scan() {
		l := r.out.Text()
		r.log.WriteString(l + "\n")
		if rest, ok := strings.CutPrefix(l, "RES "); ok {
			return rest
		}
	}
	r.t.Fatalf("node ended before answering %q: %v\n%s", line, r.out.Err(), r.log.String())
	return ""
}

func TestE2BApprovalFlow(t *testing.T) {
	work, node := sdkWork(t, "apr")
	bin := filepath.Join(work, "bin")
	state, run := filepath.Join(work, "state"), filepath.Join(work, "run")
	cfg := filepath.Join(work, "wardend.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("version: 1\ngovernance:\n  approval_ttl: %s\n", approvalTTL)), 0o644); err != nil {
		t.Fatal(err)
	}
	apiAddr, e2bAddr := freePort(t), freePort(t)
	var dlog bytes.Buffer
	d := exec.Command(filepath.Join(bin, "wardend"), "--config", cfg, "--listen", apiAddr, "--socket", filepath.Join(run, "wardend.sock"),
		"--state-dir", state, "--run-dir", run, "--agent", filepath.Join(bin, "warden-agent"), "--pool-size", "0",
		"--e2b-listen", e2bAddr)
	d.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	d.Stdout, d.Stderr = &dlog, &dlog
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		d.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { d.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			d.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("wardend log:\n%s", dlog.String())
		}
	}()
	waitE2B(t, e2bAddr, &dlog)
	keyb, err := os.ReadFile(filepath.Join(state, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(keyb))
	ctx, cancelAll := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancelAll()
	wc, err := warden.New(warden.WithBaseURL("http://"+apiAddr), warden.WithAPIKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wc.CreatePolicy(ctx, approvalPolicy); err != nil {
		t.Fatalf("create policy: %v", err)
	}
	// The approver: another principal, with approvals:decide.
	ops, err := wc.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: warden.KindUser, Name: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	opsKey, err := wc.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: ops.ID, Scopes: []string{warden.ScopeApprovalsDecide}})
	if err != nil {
		t.Fatal(err)
	}
	oc, err := warden.New(warden.WithBaseURL("http://"+apiAddr), warden.WithAPIKey(opsKey.Key))
	if err != nil {
		t.Fatal(err)
	}

	os.WriteFile(filepath.Join(work, "repl.mjs"), []byte(approvalREPL), 0o644)
	cmd := exec.CommandContext(ctx, node, "repl.mjs")
	cmd.Dir = work
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work,
		"E2B_API_URL=http://" + e2bAddr, "E2B_SANDBOX_URL=http://" + e2bAddr, "E2B_API_KEY=" + key}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var nlog bytes.Buffer
	cmd.Stderr = &nlog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
		if t.Failed() {
			t.Logf("node:\n%s", nlog.String())
		}
	}()
	r := &repl{t: t, in: stdin, out: bufio.NewScanner(stdout), log: &nlog}
	sbID, ok := strings.CutPrefix(r.next("create"), "SANDBOX ")
	if !ok {
		t.Fatalf("no sandbox: %s", nlog.String())
	}
	defer wc.KillSandbox(context.Background(), sbID)

	// held answers the E2B error of a held exec and returns its approval.
	held := func(cmdline string) string {
		t.Helper()
		res := r.do("run " + cmdline)
		id := aprRE.FindString(res)
		if !strings.HasPrefix(res, `ERR SandboxError "7: [permission_denied] approval required: approval apr_`) || id == "" ||
			!strings.Contains(res, "retry the identical request once it is approved: deploys need ops") {
			t.Fatalf("held exec %q: %s, want an E2B error naming the approval", cmdline, res)
		}
		return id
	}

	t.Run("approved", func(t *testing.T) {
		id := held("echo deploy-1")
		if again := held("echo deploy-1"); again != id {
			t.Errorf("the identical retry while pending names %s, want %s", again, id)
		}
		// The requester cannot approve its own action.
		if _, err := wc.Approve(ctx, id, "self"); err == nil {
			t.Fatal("the requester approved its own action")
		}
		if _, err := oc.Approve(ctx, id, "ok for today"); err != nil {
			t.Fatalf("approve: %v", err)
		}
		if res := r.do("run echo deploy-1"); res != `OK "deploy-1\n"` {
			t.Fatalf("the approved exec: %s", res)
		}
		// Used once: the next identical exec is held again.
		if again := held("echo deploy-1"); again == id {
			t.Errorf("the used approval %s let a second exec through", id)
		}
	})

	t.Run("approval crosses doors", func(t *testing.T) {
		// Held at the E2B door, approved, run at the native door: the
		// same action (bash -l -c and bash -lc describe one command).
		id := held("echo deploy-2")
		if _, err := oc.Approve(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		res, err := wc.Exec(ctx, sbID, warden.ExecRequest{Command: "echo deploy-2"}, warden.ExecIO{Stdout: &out})
		if err != nil || res.ExitCode != 0 || out.String() != "deploy-2\n" {
			t.Fatalf("native exec after an approval granted at the E2B door: %v %+v %q", err, res, out.String())
		}
		// And back: held at the native door, run through the SDK.
		_, err = wc.Exec(ctx, sbID, warden.ExecRequest{Command: "echo deploy-3"}, warden.ExecIO{})
		var we *warden.Error
		if !errors.As(err, &we) || we.Code != "approval_required" || aprRE.FindString(we.Message) == "" {
			t.Fatalf("native exec: %v, want approval_required", err)
		}
		if _, err := oc.Approve(ctx, aprRE.FindString(we.Message), ""); err != nil {
			t.Fatal(err)
		}
		if res := r.do("run echo deploy-3"); res != `OK "deploy-3\n"` {
			t.Fatalf("SDK exec after an approval granted at the native door: %s", res)
		}
	})

	t.Run("rejected", func(t *testing.T) {
		id := held("echo deploy-4")
		if _, err := oc.Reject(ctx, id, "not during the freeze"); err != nil {
			t.Fatal(err)
		}
		res := r.do("run echo deploy-4")
		want := `ERR SandboxError "7: [permission_denied] approval rejected: approval ` + id + ` was rejected by `
		if !strings.HasPrefix(res, want) || !strings.HasSuffix(res, `: not during the freeze"`) {
			t.Fatalf("rejected exec: %s, want %s...: not during the freeze", res, want)
		}
	})

	t.Run("expired", func(t *testing.T) {
		id := held("echo deploy-5")
		time.Sleep(approvalTTL + 2*time.Second)
		ap, err := oc.GetApproval(ctx, id)
		if err != nil || ap.State != "expired" {
			t.Fatalf("approval after its TTL: %+v %v, want expired", ap, err)
		}
		if _, err := oc.Approve(ctx, id, "too late"); err == nil {
			t.Fatal("an expired approval was approved")
		}
		// The identical retry is held again, by a new approval.
		if again := held("echo deploy-5"); again == id {
			t.Errorf("the retry after expiry names the expired approval %s", id)
		}
	})

	t.Run("lifecycle network preview", func(t *testing.T) {
		// The same rule refuses the same action at both doors.
		if res := r.do("pause"); !strings.Contains(res, "denied by policy: pausing is not allowed") {
			t.Errorf("SDK pause: %s", res)
		}
		if _, err := wc.PauseSandbox(ctx, sbID); err == nil || !strings.Contains(err.Error(), "denied by policy: pausing is not allowed") {
			t.Errorf("native pause: %v", err)
		}
		if res := r.do("opennet"); !strings.Contains(res, "denied by policy: no open network") {
			t.Errorf("SDK updateNetwork: %s", res)
		}
		if _, err := wc.SetNetwork(ctx, sbID, warden.NetworkPolicy{Mode: "open"}); err == nil || !strings.Contains(err.Error(), "denied by policy: no open network") {
			t.Errorf("native network change: %v", err)
		}
		if res := r.do("port /admin/x"); !strings.HasPrefix(res, "HTTP 403 ") || !strings.Contains(res, "denied by policy: the admin page is closed") {
			t.Errorf("E2B port request: %s", res)
		}
		if res := r.do("port /index.html"); strings.HasPrefix(res, "HTTP 403 ") {
			t.Errorf("E2B port request no rule refuses: %s", res)
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+apiAddr+"/v1/sandboxes/"+sbID+"/ports/8080/proxy/admin/x", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(body), "denied by policy: the admin page is closed") {
			t.Errorf("native port request: %d %s", resp.StatusCode, body)
		}

		// One audit event per refusal, naming the rule, at each door.
		page, err := wc.ListAudit(ctx, warden.AuditQuery{Target: sbID, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		count := map[string]int{}
		for _, ev := range page.Events {
			if ev.Outcome != "denied" {
				continue
			}
			g, _ := ev.Detail["govern"].(map[string]any)
			dec, _ := g["decision"].(map[string]any)
			if rule, _ := dec["rule_id"].(string); rule != "" {
				count[ev.Action+" "+rule]++
			}
		}
		for _, want := range []string{"e2b.sandbox.pause no-pause", "sandbox.pause no-pause", "e2b.network.update no-open-net",
			"network.update no-open-net", "e2b.port.proxy no-admin", "port.proxy no-admin"} {
			if count[want] != 1 {
				t.Errorf("%d audit events %q, want 1 (all: %v)", count[want], want, count)
			}
		}
	})
}
