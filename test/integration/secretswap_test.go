package integration

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestSecretSwapEndToEnd brokers a credential for real, on both backends:
// a sandbox that holds only a placeholder calls an HTTPS upstream on a fake
// internet (a network namespace of the test's on 192.175.48.0/24, a public
// range (AS112) no test host should route; the documentation ranges are
// taken: 192.0.2.0/24 is this VM's own network and internal/network's fake
// internet uses the other two; with its own
// DNS server and a test CA that wardend is told to trust). The upstream
// receives the real secret; its echo of it reaches the sandbox scrubbed back
// to the placeholder; a host the grant does not name receives the
// placeholder unchanged; after the grant is revoked the next request
// carries the placeholder; each use is audited by grant and version, never
// by value. Nothing here leaves the machine.
func TestSecretSwapEndToEnd(t *testing.T) {
	up := newFakeUpstream(t)
	for _, iso := range []string{"native", "gvisor"} {
		t.Run(iso, func(t *testing.T) { testSecretSwap(t, up, iso) })
	}
}

func testSecretSwap(t *testing.T, up *fakeUpstream, iso string) {
	state, run := newDirs(t)
	if iso == "gvisor" {
		t.Cleanup(func() { unmountUnder(filepath.Join(run, "gvisor")) })
	}
	cfg := filepath.Join(t.TempDir(), "wardend.yaml")
	os.WriteFile(cfg, []byte("version: 1\nnetwork:\n  dns_upstream: \"192.175.48.53\"\n"), 0o644)
	d := startDaemonEnv(t, state, run, []string{"SSL_CERT_FILE=" + up.caFile}, "--config", cfg)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	value := "sk-live-" + iso + "-REAL-0123456789abcdef"
	sec, err := c.PutSecret(ctx, "upstream-"+iso, value)
	if err != nil {
		t.Fatal(err)
	}
	sb := create(t, c, warden.CreateSandboxRequest{Isolation: iso, Network: &warden.NetworkPolicy{Mode: "allowlist",
		Allow: []warden.NetworkRule{{Host: "api.example.test"}, {Host: "other.example.test"}}}})
	g, err := c.CreateGrant(ctx, sec.ID, warden.Grant{Sandbox: sb.ID, Hosts: []string{"api.example.test"}, EnvName: "API_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	// A host the grant does not name is not intercepted: the sandbox sees
	// the upstream's own certificate, so it trusts the upstream's CA for it.
	caPEM, _ := os.ReadFile(up.caFile)
	if _, err := c.WriteFile(ctx, sb.ID, "/tmp/upstream-ca.pem", bytes.NewReader(caPEM), warden.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// intercepted: the call goes through the broker (which presents a
	// certificate of the sandbox's CA); otherwise straight to the upstream.
	call := func(host string, intercepted bool) string {
		t.Helper()
		var o, e bytes.Buffer
		ca := ""
		if !intercepted {
			ca = "--cacert /tmp/upstream-ca.pem "
		}
		script := `curl -sS -i --max-time 10 ` + ca + `-H "Authorization: Bearer $API_KEY" https://` + host + `/echo`
		res, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}}, warden.ExecIO{Stdout: &o, Stderr: &e})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %v exit %d: %s %s\n%s", host, err, res.ExitCode, o.String(), e.String(), d.log)
		}
		return o.String()
	}
	// The granted host: the upstream gets the secret, the sandbox sees the
	// placeholder in the echo.
	out := call("api.example.test", true)
	if got := up.last("api.example.test"); got != "Bearer "+value {
		t.Errorf("the granted upstream received %q, want the real secret", got)
	}
	if strings.Contains(out, value) || !strings.Contains(out, "you sent: Bearer "+g.Placeholder) {
		t.Errorf("the echo reached the sandbox as %q: want it scrubbed to the placeholder", out)
	}
	// In header and trailer names (curl -i prints both), in any case.
	lout := strings.ToLower(out)
	if strings.Contains(lout, strings.ToLower(value)) || !strings.Contains(lout, "x-leak-"+g.Placeholder+": 1") || !strings.Contains(lout, "x-trail-"+g.Placeholder+": t") {
		t.Errorf("the echo's header and trailer names reached the sandbox as %q: want them scrubbed to the placeholder", out)
	}
	// A host the grant does not name: the placeholder, unchanged.
	out = call("other.example.test", false)
	if got := up.last("other.example.test"); got != "Bearer "+g.Placeholder {
		t.Errorf("a host outside the grant received %q, want the placeholder", got)
	}
	// Nothing in the sandbox holds the value.
	var o bytes.Buffer
	// (The value is split in the command line, which the audit log records.)
	c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"/bin/sh", "-c", `env; grep -rlsF "` + value[:8] + `""` + value[8:] + `" /etc /home /tmp /proc/self/environ 2>/dev/null; true`}}, warden.ExecIO{Stdout: &o})
	if strings.Contains(o.String(), value) {
		t.Errorf("the secret is readable in the sandbox: %q", o.String())
	}
	// Revoked: the next connection is not intercepted any more and its
	// request carries the placeholder.
	if err := c.RevokeGrant(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	call("api.example.test", false)
	if got := up.last("api.example.test"); got != "Bearer "+g.Placeholder {
		t.Errorf("after revocation the upstream received %q, want the placeholder", got)
	}
	// Audited by grant and version, never by value.
	page, err := c.ListAudit(ctx, warden.AuditQuery{Target: sb.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	uses := 0
	for _, ev := range page.Events {
		if strings.Contains(fmt.Sprint(ev.Detail), value) {
			t.Errorf("audit event %s holds the value: %+v", ev.Action, ev)
		}
		if ev.Action == "secret.use" && strings.Contains(fmt.Sprint(ev.Detail), g.ID) {
			uses++
		}
	}
	if uses != 1 {
		t.Errorf("%d secret.use events for the grant, want 1 (one substituted request)", uses)
	}
	if iso == "native" {
		t.Run("AgentRun", func(t *testing.T) { testAgentSecretSwap(t, d, c, up) })
	}
}

// fakeUpstream is an HTTPS server for api.example.test and
// other.example.test at 192.175.48.10, with a DNS server at 192.175.48.53, in a
// network namespace joined to the host by a veth pair (host 192.175.48.1).
type fakeUpstream struct {
	caFile string
	mu     sync.Mutex
	auth   map[string]string // host -> the Authorization header it last got
	// routes serve these paths instead of the echo (a fake model API:
	// llm_sandbox_usage_test.go).
	routes map[string]http.Handler
}

func (u *fakeUpstream) last(host string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.auth[host]
}

func newFakeUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("iproute2 is not installed: %v", err)
	}
	if out, _ := exec.Command("ip", "-br", "addr").CombinedOutput(); strings.Contains(string(out), " 192.175.48.") {
		t.Fatalf("192.175.48.0/24 is already on an interface of this host; the test needs it for its fake upstream:\n%s", out)
	}
	ns := fmt.Sprintf("wdsec-%d", os.Getpid())
	hostIf, nsIf := fmt.Sprintf("wsh%d", os.Getpid()%100000), fmt.Sprintf("wsn%d", os.Getpid()%100000)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	exec.Command("ip", "link", "del", hostIf).Run()
	exec.Command("ip", "netns", "del", ns).Run()
	ip("netns", "add", ns)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", hostIf).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	ip("link", "add", hostIf, "type", "veth", "peer", "name", nsIf, "netns", ns)
	ip("addr", "add", "192.175.48.1/24", "dev", hostIf)
	ip("link", "set", hostIf, "up")
	ip("-n", ns, "addr", "add", "192.175.48.10/24", "dev", nsIf)
	ip("-n", ns, "addr", "add", "192.175.48.53/24", "dev", nsIf)
	ip("-n", ns, "link", "set", nsIf, "up")
	ip("-n", ns, "link", "set", "lo", "up")

	// A test CA and a certificate for both names.
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "warden test upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject: pkix.Name{CommonName: "api.example.test"}, DNSNames: []string{"api.example.test", "other.example.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	u := &fakeUpstream{caFile: filepath.Join(t.TempDir(), "upstream-ca.pem"), auth: map[string]string{}}
	if err := os.WriteFile(u.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{leafDER, caDER}, PrivateKey: leafKey}

	// Sockets made inside the namespace, served from here.
	var ln net.Listener
	var dnsPC net.PacketConn
	inNetns(t, "/var/run/netns/"+ns, func() error {
		var err error
		if ln, err = net.Listen("tcp", "192.175.48.10:443"); err != nil {
			return err
		}
		dnsPC, err = net.ListenPacket("udp", "192.175.48.53:53")
		return err
	})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		u.mu.Lock()
		u.auth[r.TLS.ServerName] = a
		route := u.routes[r.URL.Path]
		u.mu.Unlock()
		if route != nil {
			route.ServeHTTP(w, r)
			return
		}
		// The credential also goes back in a header name and a trailer
		// name, which servers canonicalize ("X-Leak-Sk-Live-..."): the
		// broker scrubs names in any case.
		token := strings.TrimPrefix(a, "Bearer ")
		w.Header().Set("X-Leak-"+token, "1")
		w.Header().Set("Trailer", "X-Trail-"+token)
		fmt.Fprintf(w, "you sent: %s\n", a)
		w.(http.Flusher).Flush()
		w.Header().Set("X-Trail-"+token, "t")
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	ds := &dns.Server{PacketConn: dnsPC, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, q := range r.Question {
			if q.Qtype == dns.TypeA && strings.HasSuffix(q.Name, "example.test.") {
				rr, _ := dns.NewRR(q.Name + " 60 IN A 192.175.48.10")
				m.Answer = append(m.Answer, rr)
			}
		}
		w.WriteMsg(m)
	})}
	go ds.ActivateAndServe()
	t.Cleanup(func() { ds.Shutdown() })
	return u
}

// inNetns runs fn on a locked thread inside the network namespace at path.
func inNetns(t *testing.T, path string, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(self)
		ns, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(ns)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		err = fn()
		if serr := unix.Setns(self, unix.CLONE_NEWNET); serr != nil {
			errc <- serr // the thread stays locked and ends with the goroutine
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
