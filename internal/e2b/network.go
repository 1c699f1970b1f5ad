package e2b

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/network"
)

// updateNetworkRequest is the body of PUT /sandboxes/{id}/network (the
// SDK's updateNetwork): it replaces the whole egress configuration.
type updateNetworkRequest struct {
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	Rules               json.RawMessage `json:"rules"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
	AllowInternetAccess *bool           `json:"allow_internet_access"`
}

// setNetwork is PUT /sandboxes/{id}/network: the new policy is mapped as
// on create (allowOut an allowlist on ports 80 and 443, denyOut only as the
// catch-all, allow_internet_access true open, nothing: none, Warden's
// default), decided as network.change and set on the running (or paused)
// sandbox; 204. Header rules and an egress proxy are not supported (400).
func (s *Server) setNetwork(w http.ResponseWriter, c *call) error {
	var q updateNetworkRequest
	if err := decode(c.r, &q); err != nil {
		return err
	}
	if notNull(q.Rules) || notNull(q.EgressProxy) {
		return errf(http.StatusBadRequest, "network rules and egressProxy are not supported by Warden")
	}
	if len(q.AllowOut) == 0 && len(q.DenyOut) > 0 && !slices.ContainsFunc(q.DenyOut, func(d string) bool { return d != "0.0.0.0/0" && d != "::/0" }) {
		q.DenyOut = nil // everything denied: none
		q.AllowInternetAccess = nil
	}
	nq := newSandboxRequest{AllowInternetAccess: q.AllowInternetAccess}
	nq.Network = &struct {
		AllowPublicTraffic *bool    `json:"allowPublicTraffic"`
		AllowOut           []string `json:"allowOut"`
		DenyOut            []string `json:"denyOut"`
	}{AllowOut: q.AllowOut, DenyOut: q.DenyOut}
	p, err := nq.networkPolicy()
	if err != nil {
		return err
	}
	if p == nil {
		p = &network.Policy{Mode: network.ModeNone}
	}
	sb, err := s.sandboxFor(c, c.r.PathValue("id"))
	if err != nil {
		return err
	}
	c.detail["mode"], c.detail["rules"] = string(p.Mode), len(p.Allow)
	if err := s.governCall(c, &govern.Action{Kind: govern.KindNetworkChange, SandboxID: sb.ID, Sandbox: sandboxInfo(sb),
		Network: networkAttrs(*p)}); err != nil {
		return err
	}
	if _, err := s.cfg.Manager.SetNetwork(c.r.Context(), sb.ID, *p); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func notNull(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// networkAttrs describes a network policy for the governed path
// (network.change, and the native API's PUT .../network the same way):
// the normalised policy's mode and allow rules' hosts or CIDRs.
func networkAttrs(p network.Policy) *govern.Network {
	if n, err := p.Normalized(); err == nil {
		p = n // an invalid policy is described as sent; the manager refuses it
	}
	allow := make([]string, 0, len(p.Allow))
	for _, rule := range p.Allow {
		allow = append(allow, cmp.Or(rule.Host, rule.CIDR))
	}
	return govern.NewNetwork(string(p.Mode), allow)
}
