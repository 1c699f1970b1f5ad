package integration

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestNetworkThroughDaemon drives sandbox networking through the real
// daemon: a policy given at create reaches the sandbox (its device and
// resolver), refused connections are audited, a live change applies, and a
// daemon restart re-attaches the network with the stored policy. The
// enforcement itself (every mode, rebinding, encodings, fronting, a fake
// internet) is tested in internal/network.
func TestNetworkThroughDaemon(t *testing.T) {
	for _, iso := range []string{"native", "gvisor"} {
		t.Run(iso, func(t *testing.T) { testNetworkThroughDaemon(t, iso) })
	}
}

// testNetworkThroughDaemon runs on one backend. A gvisor sandbox's kernel
// reads its devices at boot: wardend makes the link between create and
// start, and refuses a network for a sandbox created without one.
func testNetworkThroughDaemon(t *testing.T, iso string) {
	state, run := newDirs(t)
	if iso == "gvisor" {
		t.Cleanup(func() { unmountUnder(filepath.Join(run, "gvisor")) })
	}
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	sh := func(id, script string) (string, int) {
		t.Helper()
		var o, e bytes.Buffer
		res, err := c.Exec(ctx, id, warden.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}}, warden.ExecIO{Stdout: &o, Stderr: &e})
		if err != nil {
			t.Fatalf("%q: %v", script, err)
		}
		return o.String() + e.String(), res.ExitCode
	}
	// Default: loopback only, no device, no resolver traffic.
	plain := create(t, c, warden.CreateSandboxRequest{Isolation: iso})
	if plain.Network.Mode != "none" {
		t.Errorf("default network: %+v", plain.Network)
	}
	if out, _ := sh(plain.ID, "cat /proc/net/dev"); strings.Contains(out, "wd0") {
		t.Errorf("a sandbox without network has a device: %s", out)
	}

	pol := &warden.NetworkPolicy{Mode: "allowlist", Allow: []warden.NetworkRule{{Host: "pypi.org"}, {CIDR: "203.0.113.0/24", Ports: []int{8080}}}}
	sb := create(t, c, warden.CreateSandboxRequest{Isolation: iso, Network: pol})
	if sb.Network.Mode != "allowlist" || len(sb.Network.Allow) != 2 {
		t.Fatalf("created with %+v", sb.Network)
	}
	out, _ := sh(sb.ID, "cat /proc/net/dev /etc/resolv.conf")
	if !strings.Contains(out, "wd0") || !strings.Contains(out, "nameserver 10.254.0.1") {
		t.Errorf("allowlist sandbox: device or resolver missing:\n%s", out)
	}
	// A private address is refused inside wardend, never dialled; the
	// refusal is in the sandbox's counters and the audit log.
	probe := `python3 -c "import socket,sys
s=socket.socket(); s.settimeout(3)
try:
    s.connect(('10.0.0.5', 80)); print('connected')
except Exception as e:
    print('refused', type(e).__name__)"`
	if out, _ := sh(sb.ID, probe); !strings.Contains(out, "refused") {
		t.Errorf("connect to a private address: %s", out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		page, err := c.ListAudit(ctx, warden.AuditQuery{Target: sb.ID, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ev := range page.Events {
			found = found || (ev.Action == "network.deny" && strings.Contains(fmt.Sprint(ev.Detail), "10.0.0.5"))
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no network.deny audit event for 10.0.0.5: %+v", page.Events)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, err := c.GetNetwork(ctx, sb.ID)
	if err != nil || st.Stats == nil || st.Stats.Denied == 0 {
		t.Errorf("network status after a denial: %+v %v", st, err)
	}

	var we *warden.Error
	if iso == "native" {
		// Live change: from none to open on the plain sandbox creates its device.
		if _, err := c.SetNetwork(ctx, plain.ID, warden.NetworkPolicy{Mode: "open"}); err != nil {
			t.Fatal(err)
		}
		if out, _ := sh(plain.ID, "cat /proc/net/dev"); !strings.Contains(out, "wd0") {
			t.Errorf("after a live change to open, no device: %s", out)
		}
	} else {
		// A gvisor sandbox made without a network cannot get one live.
		if _, err := c.SetNetwork(ctx, plain.ID, warden.NetworkPolicy{Mode: "open"}); !errors.As(err, &we) || we.Code != "validation_failed" {
			t.Errorf("network for a gvisor sandbox created without one: %v, want validation_failed", err)
		}
		// One made with a network changes live: none refuses everything,
		// then open again works at once.
		if _, err := c.SetNetwork(ctx, sb.ID, warden.NetworkPolicy{Mode: "none"}); err != nil {
			t.Fatal(err)
		}
		if out, _ := sh(sb.ID, probe); !strings.Contains(out, "refused") {
			t.Errorf("after a change to none: %s", out)
		}
		if _, err := c.SetNetwork(ctx, sb.ID, *pol); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.SetNetwork(ctx, plain.ID, warden.NetworkPolicy{Mode: "bogus"}); !errors.As(err, &we) || we.Code != "validation_failed" {
		t.Errorf("bad mode: %v, want a validation error", err)
	}

	// Restart: the stack lived in the daemon; the new one re-attaches it.
	d.stop(syscall.SIGTERM)
	d2 := startDaemon(t, state, run)
	c = d2.client(t, d2.adminKey)
	if out, _ := sh(sb.ID, "cat /proc/net/dev"); !strings.Contains(out, "wd0") {
		t.Errorf("after a daemon restart the allowlist sandbox has no device: %s\n%s", out, d2.log)
	}
	// The new daemon's stack serves the sandbox: its resolver answers
	// (refusing a name the policy does not allow) and a private address is
	// refused again, counted by the new link.
	if out, _ := sh(sb.ID, `python3 -c "import socket
try: socket.getaddrinfo('denied.example', 80); print('resolved')
except socket.gaierror as e: print('no answer', e.errno)"`); !strings.Contains(out, "no answer") {
		t.Errorf("DNS after a daemon restart: %s", out)
	}
	if out, _ := sh(sb.ID, probe); !strings.Contains(out, "refused") {
		t.Errorf("connect to a private address after a restart: %s", out)
	}
	if st, err := c.GetNetwork(ctx, sb.ID); err != nil || st.Stats == nil || st.Stats.Denied == 0 || st.Stats.DNSQueries == 0 {
		t.Errorf("the re-attached link saw no traffic: %+v %v", st, err)
	}
	if iso == "gvisor" {
		// Pause (a checkpoint) and resume keep the sandbox's network.
		if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		before, _ := c.GetNetwork(ctx, sb.ID)
		if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("resume a gvisor sandbox with a network: %v\n%s", err, d2.log)
		}
		if out, _ := sh(sb.ID, probe); !strings.Contains(out, "refused") {
			t.Errorf("connect to a private address after pause and resume: %s", out)
		}
		if after, err := c.GetNetwork(ctx, sb.ID); err != nil || before.Stats == nil || after.Stats == nil || after.Stats.Denied <= before.Stats.Denied {
			t.Errorf("after resume the link saw nothing: before %+v after %+v %v", before.Stats, after.Stats, err)
		}
		// A fork gets a network of its own with the source's policy.
		forks, err := c.ForkSandbox(ctx, sb.ID, warden.ForkRequest{})
		if err != nil {
			t.Fatalf("fork a gvisor sandbox with a network: %v\n%s", err, d2.log)
		}
		f := forks[0]
		t.Cleanup(func() { c.KillSandbox(ctx, f.ID) })
		if f.Network.Mode != "allowlist" || len(f.Network.Allow) != 2 {
			t.Errorf("the fork's policy: %+v", f.Network)
		}
		if out, _ := sh(f.ID, probe); !strings.Contains(out, "refused") {
			t.Errorf("connect to a private address from the fork: %s", out)
		}
		if st, err := c.GetNetwork(ctx, f.ID); err != nil || st.Stats == nil || st.Stats.Denied == 0 {
			t.Errorf("the fork's own link saw nothing: %+v %v", st, err)
		}
	}
	if st, err := c.GetNetwork(ctx, sb.ID); err != nil || st.Policy.Mode != "allowlist" || st.Stats == nil {
		t.Errorf("network after restart: %+v %v", st, err)
	}
	c.KillSandbox(ctx, sb.ID)
	c.KillSandbox(ctx, plain.ID)
}
