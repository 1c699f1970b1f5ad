package broker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/warden-sandbox/warden/internal/govern"
)

// SecretUseGovernor decides substitutions through a govern.Engine (its
// Decide is Config.Govern): each is a secret.use action (surface egress) of
// the sandbox's owner with the secret's id and name, the grantee
// ("sandbox:ID" or "principal:ID", as the grant route describes it) and the
// host. A refusal (deny, require_approval, an error) is audited as one
// secret.use event, outcome denied, with the governed record, through the
// governed path's AuditLog; a use a rule let through carries the decided
// action in its UseEvent (the daemon's OnUse event writes it the same way). require_approval refuses the request and opens (or finds) the
// approval; the identical use passes once it is approved. Without rules
// for secret.use (Engine.Governs) it decides nothing and reads nothing.
type SecretUseGovernor struct {
	Engine *govern.Engine
	// Actor resolves a sandbox to its owner; an error refuses the use
	// (fail closed).
	Actor govern.SandboxActor
	// SecretName returns a secret's name ("" if unknown).
	SecretName func(secretID string) string
	// Audit, if set, receives the refusals.
	Audit *govern.AuditLog
	Log   *slog.Logger
}

// Decide decides one use; it is the broker's Config.Govern.
func (g *SecretUseGovernor) Decide(ctx context.Context, u *UseEvent) error {
	if g.Engine == nil || !g.Engine.Governs(govern.KindSecretUse) {
		return nil
	}
	principal, sb, err := g.Actor(ctx, u.SandboxID)
	if err != nil {
		g.log().Warn("secret use: cannot resolve the sandbox's owner; refusing", "sandbox", u.SandboxID, "err", err)
		return fmt.Errorf("secret use refused: the sandbox's owner is unknown: %w", err)
	}
	name := ""
	if g.SecretName != nil {
		name = g.SecretName(u.SecretID)
	}
	a := &govern.Action{Kind: govern.KindSecretUse, Surface: govern.SurfaceEgress, Principal: principal,
		SandboxID: u.SandboxID, Sandbox: sb,
		Secret: &govern.Secret{ID: u.SecretID, Name: name, Grant: u.Grantee, Host: u.Host}}
	d, derr := g.Engine.Decide(ctx, a)
	err = derr
	if err == nil {
		err = d.Err()
	}
	if err != nil {
		g.audit(ctx, govern.Decided{Action: a, Decision: d}, u, err)
		return err
	}
	if d.RuleID != "" || d.PolicyID != "" || d.ApprovalID != "" || d.Outcome != govern.Allow {
		u.Govern = &govern.Decided{Action: a, Decision: d}
	}
	return nil
}

func (g *SecretUseGovernor) log() *slog.Logger {
	if g.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return g.Log
}

func (g *SecretUseGovernor) audit(ctx context.Context, dd govern.Decided, u *UseEvent, err error) {
	if g.Audit == nil {
		return
	}
	// AuditLog.Write logs a failure itself.
	_ = g.Audit.Write(ctx, govern.AuditEvent{Principal: dd.Action.Principal.ID, Name: string(govern.KindSecretUse),
		Target: u.SandboxID, Outcome: govern.AuditDenied,
		Detail: map[string]any{"grant": u.GrantID, "secret": u.SecretID, "version": u.Version,
			"host": u.Host, "method": u.Method, "path": u.Path, "reason": err.Error()},
		Governed: []govern.Decided{dd}})
}
