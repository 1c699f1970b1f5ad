package integration

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestSecretsThroughDaemon: a secret granted to a sandbox reaches it only as
// a placeholder (environment), with the broker's CA installed for the
// egress path's TLS interception; the value is nowhere the sandbox can read,
// and never comes back from the API. The swap itself (upstream gets the
// value, responses scrubbed, revocation, name checks) is tested in
// internal/broker and the interception hook in internal/network.
func TestSecretsThroughDaemon(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	const value = "sk-test-THE-REAL-SECRET-0123456789"
	sec, err := c.PutSecret(ctx, "openai", value)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListSecrets(ctx)
	if err != nil || len(list) != 1 || list[0].Current != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	sb := create(t, c, warden.CreateSandboxRequest{Network: &warden.NetworkPolicy{Mode: "allowlist", Allow: []warden.NetworkRule{{Host: "api.openai.com"}}}})
	g, err := c.CreateGrant(ctx, sec.ID, warden.Grant{Sandbox: sb.ID, Hosts: []string{"api.openai.com"}, EnvName: "OPENAI_API_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.Placeholder, "warden-ph-") {
		t.Fatalf("grant: %+v", g)
	}
	var o bytes.Buffer
	script := `echo "key=$OPENAI_API_KEY ca=$SSL_CERT_FILE"; grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE"; ` +
		`grep -rlsF "` + value + `" /etc /home /tmp /proc/self/environ /proc/1/environ 2>/dev/null; true`
	if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}}, warden.ExecIO{Stdout: &o}); err != nil {
		t.Fatal(err)
	}
	out := o.String()
	if !strings.Contains(out, "key="+g.Placeholder+" ca=/etc/ssl/warden-ca-bundle.pem") {
		t.Errorf("sandbox environment: %q, want the placeholder and the CA bundle", out)
	}
	if strings.Contains(out, value) || strings.Contains(out, "/proc") || strings.Contains(out, "/etc/") && !strings.Contains(out, "ca=/etc/") {
		t.Errorf("the secret's value is readable in the sandbox: %q", out)
	}
	raw, _ := c.ListSecrets(ctx)
	if strings.Contains(fmt.Sprintf("%+v", raw), value) {
		t.Error("the API returned the secret's value")
	}
	// Rotation, grant revocation and deletion through the API.
	if s2, err := c.PutSecret(ctx, "openai", value+"-v2"); err != nil || s2.Current != 2 || s2.ID != sec.ID {
		t.Errorf("rotate: %+v %v", s2, err)
	}
	if err := c.RevokeGrant(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if gs, err := c.ListGrants(ctx, sec.ID); err != nil || len(gs) != 1 || !gs[0].Revoked {
		t.Errorf("grants after revoke: %+v %v", gs, err)
	}
	// Another principal sees none of it.
	p, err := c.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "agent", Name: "secret-reader"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: "r", Scopes: []string{"secrets:read", "secrets:write", "sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}
	other := d.client(t, k.Key)
	if l, err := other.ListSecrets(ctx); err != nil || len(l) != 0 {
		t.Errorf("another principal lists %+v %v", l, err)
	}
	if _, err := other.CreateGrant(ctx, sec.ID, warden.Grant{Sandbox: sb.ID, Hosts: []string{"x.example"}}); !warden.IsNotFound(err) {
		t.Errorf("another principal grants my secret: %v, want 404", err)
	}
	if err := c.DeleteSecret(ctx, sec.ID); err != nil {
		t.Fatal(err)
	}
	c.KillSandbox(ctx, sb.ID)
}
