package integration

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestGitHelpersBrokeredToken drives the git helpers (clone, commit, push,
// pull, status) against a real git smart-HTTP server (git http-backend
// behind TLS, on a fake internet: a network namespace of the test's on
// 192.31.196.0/24, with its own DNS server, and a test CA wardend is told
// to trust) that requires a token. The token is brokered: clone and push
// with the secret work, and the token appears nowhere in the sandbox (its
// processes' environments and command lines, its files, the repository's
// config) nor in the audit log; a push without the secret is refused by
// the server; malicious URLs and paths are 400s; and the helper's grant is
// revoked after each command.
func TestGitHelpersBrokeredToken(t *testing.T) {
	if _, err := os.Stat(gitHTTPBackend); err != nil {
		t.Fatalf("git http-backend is not installed (%v): the test needs git (scripts/install-deps.sh installs it)", err)
	}
	token := "ghp_" + randHex(t, 18)
	srv := newGitServer(t, token)

	state, run := newDirs(t)
	cfg := filepath.Join(t.TempDir(), "wardend.yaml")
	os.WriteFile(cfg, []byte("version: 1\nnetwork:\n  dns_upstream: \"192.31.196.53\"\n"), 0o644)
	d := startDaemonEnv(t, state, run, []string{"SSL_CERT_FILE=" + srv.caFile}, "--config", cfg)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)

	sec, err := c.PutSecret(ctx, "git-token", token)
	if err != nil {
		t.Fatal(err)
	}
	sb := create(t, c, warden.CreateSandboxRequest{Network: &warden.NetworkPolicy{Mode: "allowlist",
		Allow: []warden.NetworkRule{{Host: "git.example.test"}}}})
	const url = "https://git.example.test/repo.git"

	// Malicious or malformed input: 400, nothing runs.
	for _, bad := range []warden.GitCloneRequest{
		{URL: "ext::sh -c touch% /tmp/pwned"},
		{URL: "-uhttps://git.example.test/repo.git"},
		{URL: "--upload-pack=touch /tmp/pwned"},
		{URL: "file:///etc"},
		{URL: "https://user:" + "pw@git.example.test/repo.git"},
		{URL: url, Path: "../../etc/x"},
		{URL: url, Path: "/tmp/-x"},
		{URL: url, Branch: "--upload-pack=x"},
	} {
		_, err := c.GitClone(ctx, sb.ID, bad)
		var ae *warden.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
			t.Errorf("clone %+v: err = %v, want a 400", bad, err)
		}
	}

	// Clone with the brokered secret.
	res, err := c.GitClone(ctx, sb.ID, warden.GitCloneRequest{URL: url, Path: "repo", Secret: sec.ID})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("clone: %v %+v\n%s", err, res, d.log)
	}
	if want := srv.head(t); res.Head != want || res.Path != "/home/user/repo" {
		t.Fatalf("clone: head %q path %q, want %q in /home/user/repo", res.Head, res.Path, want)
	}
	if got := srv.authorized.Load(); got == 0 {
		t.Fatal("the server saw no authorized request")
	}

	// Commit a new file, push it with the secret: it lands in the bare repository.
	if _, err := c.WriteFile(ctx, sb.ID, "/home/user/repo/new.txt", strings.NewReader("from the sandbox\n"), warden.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := c.GitStatus(ctx, sb.ID, "repo")
	if err != nil || st.Branch != "main" || st.Clean == nil || *st.Clean || len(st.Changes) != 1 {
		t.Errorf("status before commit: %v %+v", err, st)
	}
	cm, err := c.GitCommit(ctx, sb.ID, warden.GitCommitRequest{Path: "repo", Message: "Add new.txt", AuthorName: "Agent", AuthorEmail: "agent@example.com"})
	if err != nil || cm.ExitCode != 0 || len(cm.Head) != 40 {
		t.Fatalf("commit: %v %+v", err, cm)
	}
	ps, err := c.GitPush(ctx, sb.ID, warden.GitRemoteRequest{Path: "repo", Secret: sec.ID})
	if err != nil || ps.ExitCode != 0 {
		t.Fatalf("push: %v %+v\n%s", err, ps, d.log)
	}
	if got := srv.head(t); got != cm.Head {
		t.Fatalf("the server's main is %s after the push, want the sandbox's commit %s", got, cm.Head)
	}
	if out := srv.git(t, "log", "-1", "--format=%an <%ae> %s", "main"); out != "Agent <agent@example.com> Add new.txt" {
		t.Errorf("the pushed commit is %q", out)
	}

	// Pull (with the secret) a commit made on the server.
	upstream := srv.commitOnServer(t)
	pl, err := c.GitPull(ctx, sb.ID, warden.GitRemoteRequest{Path: "repo", Secret: sec.ID})
	if err != nil || pl.ExitCode != 0 || pl.Head != upstream {
		t.Fatalf("pull: %v %+v, want head %s", err, pl, upstream)
	}

	// A push without the secret is refused by the server. Without a grant
	// the sandbox reaches the server directly: let it trust the server's
	// CA as it would a public one.
	caPEM, _ := os.ReadFile(srv.caFile)
	if _, err := c.WriteFile(ctx, sb.ID, "/tmp/git-ca.pem", bytes.NewReader(caPEM), warden.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Exec(ctx, sb.ID, warden.ExecRequest{User: "root", Cmd: []string{"/bin/sh", "-c", "cat /tmp/git-ca.pem >> /etc/ssl/certs/ca-certificates.crt"}}, warden.ExecIO{}); err != nil || r.ExitCode != 0 {
		t.Fatalf("trust the server's CA: %v %+v", err, r)
	}
	if _, err := c.WriteFile(ctx, sb.ID, "/home/user/repo/second.txt", strings.NewReader("2\n"), warden.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if cm, err := c.GitCommit(ctx, sb.ID, warden.GitCommitRequest{Path: "repo", Message: "Second", AuthorName: "Agent", AuthorEmail: "agent@example.com"}); err != nil || cm.ExitCode != 0 {
		t.Fatalf("second commit: %v %+v", err, cm)
	}
	denied := srv.denied.Load()
	ps, err = c.GitPush(ctx, sb.ID, warden.GitRemoteRequest{Path: "repo"})
	if err != nil {
		t.Fatal(err)
	}
	if ps.ExitCode == 0 || srv.denied.Load() == denied {
		t.Errorf("a push without the secret: exit %d, server refusals %d -> %d; want a refusal\n%s", ps.ExitCode, denied, srv.denied.Load(), ps.Stderr)
	}
	if got := srv.head(t); got != upstream {
		t.Errorf("the server's main moved to %s without the token", got)
	}

	// Brokering a secret needs secrets:write and the secret's ownership.
	p, err := c.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: "git-agent"})
	if err != nil {
		t.Fatal(err)
	}
	key := func(scopes ...string) *warden.Client {
		k, err := c.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: "git", Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return d.client(t, k.Key)
	}
	noSecrets, withSecrets := key("sandboxes:create", "sandboxes:exec"), key("sandboxes:create", "sandboxes:exec", "secrets:write")
	asb := create(t, noSecrets, warden.CreateSandboxRequest{Network: &warden.NetworkPolicy{Mode: "none"}})
	if _, err := noSecrets.GitClone(ctx, asb.ID, warden.GitCloneRequest{URL: url, Secret: sec.ID}); !warden.IsForbidden(err) {
		t.Errorf("clone with a secret, no secrets:write: %v, want 403", err)
	}
	if _, err := withSecrets.GitClone(ctx, asb.ID, warden.GitCloneRequest{URL: url, Secret: sec.ID}); !warden.IsNotFound(err) {
		t.Errorf("clone with another principal's secret: %v, want 404", err)
	}

	// The CLI: status.
	if out, errOut, code := d.cli(t, "", "git", "status", sb.ID, "repo"); code != 0 || !strings.Contains(out, "branch main") {
		t.Errorf("warden git status: %d %q %q", code, out, errOut)
	}

	// The token is nowhere in the sandbox: every process's environment and
	// command line, its files, the repository's config. (The token is split
	// on the command line, which the audit log records.)
	var o bytes.Buffer
	script := `env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n'; ` +
		`grep -rlsF "` + token[:6] + `""` + token[6:] + `" /etc /home /tmp /root 2>/dev/null; ` +
		`cat /home/user/repo/.git/config /home/user/.gitconfig 2>/dev/null; true`
	if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}}, warden.ExecIO{Stdout: &o}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(o.String(), token) || strings.Contains(o.String(), base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))) {
		t.Errorf("the token is readable in the sandbox:\n%s", o.String())
	}
	var cfgBuf bytes.Buffer
	if r, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"cat", "/home/user/repo/.git/config"}}, warden.ExecIO{Stdout: &cfgBuf}); err != nil || r.ExitCode != 0 {
		t.Fatalf("read the repository's config: %v %+v", err, r)
	}
	cfgOut := cfgBuf.String()
	if !strings.Contains(cfgOut, "git.example.test") || strings.Contains(strings.ToLower(cfgOut), "extraheader") || strings.Contains(cfgOut, "warden-ph-") {
		t.Errorf("the repository's config holds the helper's header:\n%s", cfgOut)
	}

	// Every grant the helpers made is revoked, each a Basic grant for the host only.
	grants, err := c.ListGrants(ctx, sec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(grants) != 3 {
		t.Errorf("%d grants, want 3 (clone, push, pull)", len(grants))
	}
	for _, g := range grants {
		if !g.Revoked || g.Format != "basic" || g.ManagedBy != "git-helper" || len(g.Hosts) != 1 || g.Hosts[0] != "git.example.test" {
			t.Errorf("grant after the helpers: %+v", g)
		}
	}

	// Audited: each helper as its git command, with the secret and grant,
	// and the broker's uses; never the token.
	page, err := c.ListAudit(ctx, warden.AuditQuery{Target: sb.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, ev := range page.Events {
		if s := fmt.Sprintf("%+v", ev); strings.Contains(s, token) {
			t.Errorf("audit event %s holds the token: %s", ev.Action, s)
		}
		seen[ev.Action]++
		if ev.Action == "git.push" && ev.Outcome == "success" && ev.Detail["secret"] == sec.ID && !strings.Contains(fmt.Sprint(ev.Detail["cmd"]), "push") {
			t.Errorf("git.push audit event: %+v", ev.Detail)
		}
	}
	if seen["git.clone"] < 1 || seen["git.push"] != 2 || seen["git.commit"] != 2 || seen["git.pull"] != 1 || seen["secret.use"] < 3 {
		t.Errorf("audit actions: %v", seen)
	}
}

const gitHTTPBackend = "/usr/lib/git-core/git-http-backend"

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// gitServer is git http-backend over HTTPS for git.example.test at
// 192.31.196.10, with a DNS server at 192.31.196.53, in a network namespace
// joined to the host by a veth pair (host 192.31.196.1). It answers 401
// to any request without exactly "Authorization: Basic
// base64(x-access-token:TOKEN)".
type gitServer struct {
	caFile     string
	root       string // GIT_PROJECT_ROOT; the repository is repo.git
	authorized atomic.Int64
	denied     atomic.Int64
}

func (s *gitServer) git(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir", filepath.Join(s.root, "repo.git")}, args...)...)
	cmd.Env = gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (s *gitServer) head(t *testing.T) string { return s.git(t, "rev-parse", "main") }

func gitEnv() []string {
	return []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=Server",
		"GIT_AUTHOR_EMAIL=server@example.test", "GIT_COMMITTER_NAME=Server", "GIT_COMMITTER_EMAIL=server@example.test"}
}

// commitOnServer adds a commit to main on the server and returns it.
func (s *gitServer) commitOnServer(t *testing.T) string {
	t.Helper()
	work := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = work, gitEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	run("clone", "-q", filepath.Join(s.root, "repo.git"), ".")
	os.WriteFile(filepath.Join(work, "upstream.txt"), []byte("from the server\n"), 0o644)
	run("add", "upstream.txt")
	run("commit", "-q", "-m", "Upstream change")
	run("push", "-q", "origin", "main")
	return s.head(t)
}

func newGitServer(t *testing.T, token string) *gitServer {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("iproute2 is not installed: %v", err)
	}
	if out, _ := exec.Command("ip", "-br", "addr").CombinedOutput(); strings.Contains(string(out), " 192.31.196.") {
		t.Fatalf("192.31.196.0/24 is already on an interface of this host; the test needs it for its git server:\n%s", out)
	}
	s := &gitServer{root: t.TempDir()}
	// The repository: main with one commit.
	seed := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", filepath.Join(s.root, "repo.git")},
		{"init", "-q", "-b", "main", seed},
		{"-C", seed, "commit", "-q", "--allow-empty", "-m", "Initial commit"},
		{"-C", seed, "push", "-q", filepath.Join(s.root, "repo.git"), "main"},
		{"--git-dir", filepath.Join(s.root, "repo.git"), "config", "http.receivepack", "true"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Env = gitEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}

	ns := fmt.Sprintf("wdgit-%d", os.Getpid())
	hostIf, nsIf := fmt.Sprintf("wgh%d", os.Getpid()%100000), fmt.Sprintf("wgn%d", os.Getpid()%100000)
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
	ip("addr", "add", "192.31.196.1/24", "dev", hostIf)
	ip("link", "set", hostIf, "up")
	ip("-n", ns, "addr", "add", "192.31.196.10/24", "dev", nsIf)
	ip("-n", ns, "addr", "add", "192.31.196.53/24", "dev", nsIf)
	ip("-n", ns, "link", "set", nsIf, "up")
	ip("-n", ns, "link", "set", "lo", "up")

	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "warden test git CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject: pkix.Name{CommonName: "git.example.test"}, DNSNames: []string{"git.example.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	s.caFile = filepath.Join(t.TempDir(), "git-ca.pem")
	if err := os.WriteFile(s.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}

	var ln net.Listener
	var dnsPC net.PacketConn
	inNetns(t, "/var/run/netns/"+ns, func() error {
		var err error
		if ln, err = net.Listen("tcp", "192.31.196.10:443"); err != nil {
			return err
		}
		dnsPC, err = net.ListenPacket("udp", "192.31.196.53:53")
		return err
	})
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))
	backend := &cgi.Handler{Path: gitHTTPBackend, Root: "/",
		Env: []string{"GIT_PROJECT_ROOT=" + s.root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=tester", "GIT_CONFIG_NOSYSTEM=1", "HOME=/nonexistent"}}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != want {
			s.denied.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		s.authorized.Add(1)
		backend.ServeHTTP(w, r)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER, caDER}, PrivateKey: leafKey}}}}
	go hs.ServeTLS(ln, "", "")
	t.Cleanup(func() { hs.Close() })
	ds := &dns.Server{PacketConn: dnsPC, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, q := range r.Question {
			if q.Qtype == dns.TypeA && strings.HasSuffix(q.Name, "example.test.") {
				rr, _ := dns.NewRR(q.Name + " 60 IN A 192.31.196.10")
				m.Answer = append(m.Answer, rr)
			}
		}
		w.WriteMsg(m)
	})}
	go ds.ActivateAndServe()
	t.Cleanup(func() { ds.Shutdown() })
	return s
}
