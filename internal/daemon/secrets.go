package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"

	"github.com/warden-sandbox/warden/internal/broker"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/secrets"
)

// caPath is where a sandbox with credential grants finds the trust bundle
// (the host's roots plus its own broker CA).
const caPath = "/etc/ssl/warden-ca-bundle.pem"

// secretHooks connects the secret store, the broker, the sandboxes and the
// egress path.
type secretHooks struct {
	mgr    *sandbox.Manager
	vault  *secrets.Vault
	broker *broker.Broker
	log    *slog.Logger
}

// Apply gives a running sandbox what its grants need: the trust bundle
// with its broker CA, and the placeholders (and the CA variables) in the
// environment of processes started from now on. Without grants it does
// nothing.
func (h *secretHooks) Apply(ctx context.Context, sandboxID, owner string) error {
	env := h.vault.EnvFor(sandboxID, owner)
	if len(h.vault.GrantsFor(sandboxID, owner)) == 0 {
		return nil
	}
	bundle, err := h.broker.TrustBundle(sandboxID)
	if err != nil {
		return err
	}
	c, err := h.mgr.Agent(ctx, sandboxID)
	if err != nil {
		return err
	}
	if err := c.WriteFile(ctx, caPath, "root", 0o644, bytes.NewReader(bundle)); err != nil {
		return err
	}
	if env == nil {
		env = map[string]string{}
	}
	for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"} {
		env[k] = caPath
	}
	return c.Init(ctx, env)
}

// owner is the principal that owns a sandbox ("" if unknown).
func (h *secretHooks) owner(sandboxID string) string {
	sb, err := h.mgr.Get(context.Background(), sandboxID)
	if err != nil {
		return ""
	}
	return sb.Owner
}

// intercept reports whether a TLS connection to serverName should go
// through the broker: a live grant of this sandbox covers the name.
func (h *secretHooks) intercept(sandboxID, serverName string) bool {
	for _, g := range h.vault.GrantsFor(sandboxID, h.owner(sandboxID)) {
		if g.CoversHost(serverName) {
			return true
		}
	}
	return false
}

// handoff passes an intercepted connection to the broker.
func (h *secretHooks) handoff(ctx context.Context, sandboxID string, client net.Conn, target netip.AddrPort, names []string) error {
	return h.broker.Handle(ctx, sandboxID, h.owner(sandboxID), client, target, names)
}
