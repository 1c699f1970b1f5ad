package daemon

import (
	"context"
	"fmt"
	"strings"

	"github.com/warden-sandbox/warden/internal/agents"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/secrets"
	"github.com/warden-sandbox/warden/internal/store"
)

// agentGrantsHooks gives hosted agents' run sandboxes their spec's secrets
// (docs/agents.md): grants of the secrets store made to the run's sandbox,
// marked as the agent's, revoked with the sandbox (sandboxEnded purges
// them) or kept in step with the spec for a persistent one.
type agentGrantsHooks struct{ d *daemon }

// agentGrants is nil without a secrets store (specs with secrets are then
// refused).
func (d *daemon) agentGrants() agents.Grants {
	if d.vault == nil {
		return nil
	}
	return agentGrantsHooks{d}
}

// agentTeams is the store's team memories (nil when it keeps none).
func (d *daemon) agentTeams() agents.Teams {
	t, _ := d.st.(store.MemoryTeamStore)
	if t == nil {
		return nil
	}
	return t
}

// resolve finds a spec entry's secret: owner's secret of that name, else a
// secret with that ID.
func (h agentGrantsHooks) resolve(owner, ref string) (secrets.Secret, error) {
	if sec, err := h.d.vault.Lookup(owner, ref); err == nil {
		return sec, nil
	}
	if strings.HasPrefix(ref, "sec-") {
		if sec, err := h.d.vault.Get(ref); err == nil {
			return sec, nil
		}
	}
	return secrets.Secret{}, secrets.ErrNotFound
}

// CheckSecrets implements agents.Grants: each secret must exist and be
// by's own (the secrets store's rule for granting it), or by an admin.
func (h agentGrantsHooks) CheckSecrets(ctx context.Context, by auth.Identity, owner string, gs []agents.SecretGrant) error {
	for _, g := range gs {
		sec, err := h.resolve(owner, g.Secret)
		if err != nil {
			return &agents.InvalidError{Msg: fmt.Sprintf("agent spec: secrets: no secret %q of the agent's owner", g.Secret)}
		}
		if sec.Owner != by.Principal.ID && !by.Has(auth.ScopeAdmin) {
			return &agents.ForbiddenError{Msg: fmt.Sprintf("agent spec: secrets: secret %q is not yours to grant", g.Secret)}
		}
	}
	return nil
}

// SyncSandbox implements agents.Grants.
func (h agentGrantsHooks) SyncSandbox(ctx context.Context, agent, owner, principalID, sandboxID string, gs []agents.SecretGrant, apply bool) (map[string]string, error) {
	want := make([]secrets.Grant, 0, len(gs))
	for _, g := range gs {
		sec, err := h.resolve(owner, g.Secret)
		if err != nil {
			return nil, fmt.Errorf("secret %q of the agent's owner: %w", g.Secret, err)
		}
		want = append(want, secrets.Grant{SecretID: sec.ID, Hosts: g.Hosts, Header: g.Header, PathPrefix: g.PathPrefix, EnvName: g.EnvName})
	}
	_, err := h.d.vault.SyncSandboxGrants(sandboxID, "agent:"+agent, want)
	if err != nil {
		return nil, err
	}
	if !apply || len(h.d.vault.GrantsFor(sandboxID, principalID)) == 0 {
		return nil, nil
	}
	// The sandbox's trust bundle and default environment (processes
	// started from now on), and the run's own variables.
	if err := h.d.hooks.Apply(ctx, sandboxID, principalID); err != nil {
		return nil, fmt.Errorf("hand the grants to the sandbox: %w", err)
	}
	env := h.d.vault.EnvFor(sandboxID, principalID)
	for _, k := range caEnv {
		env[k] = caPath
	}
	return env, nil
}

// caEnv are the variables that point TLS clients at the trust bundle
// (secretHooks.Apply sets them too).
var caEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}
