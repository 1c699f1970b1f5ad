package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/secrets"
)

// Secrets and grants (brokered credentials, docs/networking.md). A secret's
// value goes in once and never comes out of the API: listings carry only
// metadata and a fingerprint. A grant lets one sandbox, or every sandbox of
// an agent principal, use a secret on given hosts through a placeholder;
// the egress path swaps the placeholder for the value on the wire.

// SecretHooks is what the API needs from the daemon for grants to take
// effect in running sandboxes.
type SecretHooks interface {
	// Apply hands a sandbox the placeholders and the CA trust that its
	// grants need (environment for new processes, the CA bundle file).
	Apply(ctx context.Context, sandboxID, owner string) error
}

func (s *Server) vault() (*secrets.Vault, error) {
	if s.cfg.Secrets == nil {
		return nil, apierr.New(apierr.CodeUnavailable, "this daemon has no secret store")
	}
	return s.cfg.Secrets, nil
}

// secretOwned returns secret id if the caller owns it (or is an admin);
// someone else's secret is a 404.
func (s *Server) secretOwned(r *http.Request, v *secrets.Vault, id string) (secrets.Secret, error) {
	st := stateOf(r)
	st.target = id
	sec, err := v.Get(id)
	if err != nil || (sec.Owner != st.principal && !st.ident.Has(auth.ScopeAdmin)) {
		return secrets.Secret{}, notFoundf("secret %s not found", id)
	}
	return sec, nil
}

func secretErr(err error) error {
	switch {
	case errors.Is(err, secrets.ErrInvalid):
		return apierr.Validation("%v", err)
	case errors.Is(err, secrets.ErrNotFound):
		return apierr.NotFound("%v", err)
	}
	return err
}

// putSecret creates a secret, or rotates it (a new version) when the
// caller already has one by that name.
func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	var q struct {
		Name  *string `json:"name"`
		Value *string `json:"value"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Name == nil || q.Value == nil {
		return apierr.Validation("name and value are required")
	}
	st := stateOf(r)
	sec, err := v.Put(*q.Name, st.principal, []byte(*q.Value))
	if err != nil {
		return secretErr(err)
	}
	st.target = sec.ID
	st.detail["name"] = sec.Name
	st.detail["version"] = sec.Current
	return writeJSON(w, http.StatusOK, sec)
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	st := stateOf(r)
	owner := st.principal
	if st.ident.Has(auth.ScopeAdmin) {
		owner = ""
	}
	list := v.List(owner)
	if list == nil {
		list = []secrets.Secret{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"secrets": list})
}

func (s *Server) revokeSecret(w http.ResponseWriter, r *http.Request) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	sec, err := s.secretOwned(r, v, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := v.Revoke(sec.ID); err != nil {
		return secretErr(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	sec, err := s.secretOwned(r, v, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := v.Delete(sec.ID); err != nil {
		return secretErr(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// createGrant lets a sandbox (or an agent principal's sandboxes) use a
// secret on hosts. The caller must own the secret and may grant it only to
// a sandbox it can access, or to itself or a principal it created.
func (s *Server) createGrant(w http.ResponseWriter, r *http.Request) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	sec, err := s.secretOwned(r, v, r.PathValue("id"))
	if err != nil {
		return err
	}
	var q struct {
		Sandbox    string   `json:"sandbox"`
		Principal  string   `json:"principal"`
		Middleware string   `json:"middleware"`
		Hosts      []string `json:"hosts"`
		Header     string   `json:"header"`
		PathPrefix string   `json:"path_prefix"`
		EnvName    string   `json:"env_name"`
		Format     string   `json:"format"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	st := stateOf(r)
	owner := ""
	switch {
	case q.Middleware != "":
		// A middleware reads the value itself (secrets.NAME): only an
		// administrator, never an agent's key, grants that (mwgrant.go).
		if q.Sandbox != "" || q.Principal != "" {
			return apierr.Validation("grant to a sandbox, a principal or a middleware, one of them")
		}
		if err := s.mwGrantee(r, q.Middleware); err != nil {
			return err
		}
	case q.Sandbox != "" && q.Principal != "":
		return apierr.Validation("grant to a sandbox or to a principal, not both")
	case q.Sandbox != "":
		sb, err := s.sandboxFor(r, q.Sandbox)
		if err != nil {
			return err
		}
		owner = sb.Owner
		q.Sandbox = sb.ID // it may have been a name
	case q.Principal != "":
		p, err := s.cfg.Store.GetPrincipal(r.Context(), q.Principal)
		if err != nil || (p.ID != st.principal && p.CreatedBy != st.principal && !st.ident.Has(auth.ScopeAdmin)) {
			return notFoundf("principal %s not found", q.Principal)
		}
	default:
		return apierr.Validation("sandbox or principal is required")
	}
	st.target = sec.ID
	// Granting a secret is governed as its use: by the sandbox (or the
	// principal's sandboxes), on the hosts (comma-separated).
	grantee := "sandbox:" + q.Sandbox
	if q.Principal != "" {
		grantee = "principal:" + q.Principal
	}
	if q.Middleware != "" {
		grantee = "middleware:" + q.Middleware
		st.detail["middleware"] = q.Middleware
	}
	if err := s.decide(r, &govern.Action{Secret: &govern.Secret{ID: sec.ID, Name: sec.Name, Grant: grantee,
		Host: strings.Join(q.Hosts, ",")}}); err != nil {
		return err
	}
	g, err := v.CreateGrant(secrets.Grant{SecretID: sec.ID, Sandbox: q.Sandbox, Principal: q.Principal, Middleware: q.Middleware, Hosts: q.Hosts,
		Header: q.Header, PathPrefix: q.PathPrefix, EnvName: q.EnvName, Format: q.Format})
	if err != nil {
		return secretErr(err)
	}
	st.detail["grant"] = g.ID
	st.detail["hosts"] = fmt.Sprint(g.Hosts)
	if q.Sandbox != "" && s.cfg.SecretHooks != nil {
		if err := s.cfg.SecretHooks.Apply(r.Context(), q.Sandbox, owner); err != nil {
			s.log.Warn("hand a grant to its sandbox", "sandbox", q.Sandbox, "err", err)
		}
	}
	return writeJSON(w, http.StatusCreated, g)
}

func (s *Server) listGrants(w http.ResponseWriter, r *http.Request) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	sec, err := s.secretOwned(r, v, r.PathValue("id"))
	if err != nil {
		return err
	}
	list := v.ListGrants(sec.ID)
	if list == nil {
		list = []secrets.Grant{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"grants": list})
}

func (s *Server) revokeGrant(w http.ResponseWriter, r *http.Request) error {
	v, err := s.vault()
	if err != nil {
		return err
	}
	g, err := v.GetGrant(r.PathValue("id"))
	if err != nil {
		return notFoundf("grant %s not found", r.PathValue("id"))
	}
	if _, err := s.secretOwned(r, v, g.SecretID); err != nil {
		return notFoundf("grant %s not found", g.ID)
	}
	stateOf(r).target = g.ID
	if err := v.RevokeGrant(g.ID); err != nil {
		return secretErr(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
