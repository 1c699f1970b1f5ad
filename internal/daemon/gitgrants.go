package daemon

import (
	"log/slog"

	"github.com/warden-sandbox/warden/internal/gitops"
	"github.com/warden-sandbox/warden/internal/secrets"
)

// revokeStaleGitGrants revokes the grants the git helpers make for the
// duration of one command (internal/api/git.go) that are still in force
// at start: a daemon that stopped during such a command never revoked its
// grant.
func revokeStaleGitGrants(v *secrets.Vault, log *slog.Logger) {
	n, err := v.RevokeManagedBy(gitops.GrantManager)
	if err != nil {
		log.Error("revoke the grants of git helpers interrupted by a stop", "err", err)
		return
	}
	if n > 0 {
		log.Info("revoked the grants of git helpers interrupted by a stop", "grants", n)
	}
}
