package api

import (
	"net/http"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
)

// Secrets granted to middleware (docs/guardrails.md, "Secrets"): a grant
// with "middleware" lets that middleware's script read the secret's value
// (secrets.NAME, when its definition lists NAME). Unlike a sandbox's
// placeholder, the value itself reaches the script, so only an
// administrator may grant it, never an agent's key, and only to an
// installed middleware. Removing an API-added middleware removes its
// grants.

// mwGrantee checks that the caller may grant a secret to middleware name.
func (s *Server) mwGrantee(r *http.Request, name string) error {
	st := stateOf(r)
	if st.ident == nil || !st.ident.Has(auth.ScopeAdmin) {
		return deny(apierr.Forbidden("granting a secret to a middleware needs the admin scope"))
	}
	if err := notAgent(r); err != nil {
		return err
	}
	reg, err := s.mwRegistry()
	if err != nil {
		return err
	}
	if _, err := reg.Get(name); err != nil {
		return mwError(err)
	}
	return nil
}

// purgeMiddlewareGrants removes the grants of a removed middleware, so that
// a new one of its name starts with none.
func (s *Server) purgeMiddlewareGrants(name string) {
	if s.cfg.Secrets == nil {
		return
	}
	if err := s.cfg.Secrets.PurgeMiddleware(name); err != nil {
		s.log.Warn("remove a deleted middleware's secret grants", "middleware", name, "err", err)
	}
}
