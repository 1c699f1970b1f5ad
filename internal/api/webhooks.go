package api

import (
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/secrets"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/webhook"
)

// webhookView is the Webhook schema.
type webhookView struct {
	Name        string              `json:"name"`
	Source      string              `json:"source"`
	URL         string              `json:"url"`
	Secret      string              `json:"secret"`
	Events      []string            `json:"events"`
	Outcomes    []string            `json:"outcomes"`
	MaxAttempts int                 `json:"max_attempts"`
	Enabled     bool                `json:"enabled"`
	CreatedBy   string              `json:"created_by,omitempty"`
	CreatedAt   *time.Time          `json:"created_at,omitempty"`
	UpdatedAt   *time.Time          `json:"updated_at,omitempty"`
	Delivery    webhookDeliveryView `json:"delivery"`
}

// webhookDeliveryView is the WebhookDelivery schema.
type webhookDeliveryView struct {
	Running         bool       `json:"running"`
	Cursor          int64      `json:"cursor"`
	Attempts        int        `json:"attempts"`
	Delivered       int64      `json:"delivered"`
	GivenUp         int64      `json:"given_up"`
	LastAttemptAt   *time.Time `json:"last_attempt_at,omitempty"`
	LastStatus      int        `json:"last_status,omitempty"`
	LastError       string     `json:"last_error,omitempty"`
	LastDeliveredAt *time.Time `json:"last_delivered_at,omitempty"`
}

// webhookWrite is the WebhookWrite schema.
type webhookWrite struct {
	Name        string   `json:"name"`
	URL         string   `json:"url"`
	Secret      string   `json:"secret"`
	Events      []string `json:"events"`
	Outcomes    []string `json:"outcomes"`
	MaxAttempts int      `json:"max_attempts"`
	Enabled     *bool    `json:"enabled"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func webhookOf(e webhook.Endpoint) webhookView {
	v := webhookView{Name: e.Name, Source: e.Source, URL: e.URL, Secret: e.SecretID, Events: e.Events, Outcomes: e.Outcomes,
		MaxAttempts: e.MaxAttempts, Enabled: e.Enabled, CreatedBy: e.CreatedBy, CreatedAt: timePtr(e.CreatedAt),
		UpdatedAt: timePtr(e.UpdatedAt)}
	if v.Outcomes == nil {
		v.Outcomes = []string{}
	}
	if v.Events == nil {
		v.Events = []string{}
	}
	c := e.State
	v.Delivery = webhookDeliveryView{Running: e.Running, Cursor: c.Seq, Attempts: c.Attempts, Delivered: c.Delivered,
		GivenUp: c.GivenUp, LastAttemptAt: timePtr(c.LastAttemptAt), LastStatus: c.LastStatus, LastError: c.LastError,
		LastDeliveredAt: timePtr(c.LastDeliveredAt)}
	return v
}

func (s *Server) webhooks() (*webhook.Admin, error) {
	if s.cfg.Webhooks == nil {
		return nil, apierr.Unavailable("outgoing webhooks are not configured on this daemon", nil)
	}
	return s.cfg.Webhooks, nil
}

// webhookErr maps the Admin's errors to API errors.
func webhookErr(name string, err error) error {
	var inv *webhook.InvalidError
	switch {
	case errors.As(err, &inv):
		return apierr.BadRequest("%s", inv.Msg)
	case errors.Is(err, store.ErrNotFound):
		return notFoundf("webhook endpoint %s not found", truncate(name, 80))
	case errors.Is(err, webhook.ErrReadOnly):
		return apierr.Conflict("webhook endpoint %s is configured in the config file: change it there", truncate(name, 80))
	case errors.Is(err, webhook.ErrExists):
		return apierr.Conflict("webhook endpoint %s exists", truncate(name, 80))
	}
	return err
}

func webhookChange(op string, e store.WebhookEndpoint) *govern.WebhookChange {
	c := &govern.WebhookChange{Op: op, Name: e.Name, URL: e.URL, Events: e.Events, Outcomes: e.Outcomes, Enabled: e.Enabled}
	if u, err := url.Parse(e.URL); err == nil {
		c.Host = u.Hostname()
	}
	return c
}

// decodeWebhook reads a WebhookWrite and checks that the caller may sign
// with its secret (its own, or any with admin).
func (s *Server) decodeWebhook(r *http.Request) (store.WebhookEndpoint, error) {
	var q webhookWrite
	if err := decodeJSON(r, &q, true); err != nil {
		return store.WebhookEndpoint{}, err
	}
	e := store.WebhookEndpoint{Name: q.Name, URL: q.URL, SecretID: q.Secret, Events: q.Events, Outcomes: q.Outcomes,
		MaxAttempts: q.MaxAttempts, Enabled: q.Enabled == nil || *q.Enabled}
	if len(e.Outcomes) == 0 {
		e.Outcomes = nil
	}
	if e.SecretID == "" {
		return e, apierr.BadRequest("secret: the ID of the secret holding the signing key is required")
	}
	if s.cfg.Secrets == nil {
		return e, apierr.Unavailable("the secret store is not configured", nil)
	}
	sec, err := s.cfg.Secrets.Get(e.SecretID)
	id := stateOf(r).ident
	if errors.Is(err, secrets.ErrNotFound) || (err == nil && sec.Owner != id.Principal.ID && !id.Has(auth.ScopeAdmin)) {
		return e, apierr.BadRequest("secret %s: no such secret of yours", truncate(e.SecretID, 80))
	}
	if err != nil {
		return e, err
	}
	return e, nil
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	a, err := s.webhooks()
	if err != nil {
		return err
	}
	eps, err := a.List(r.Context())
	if err != nil {
		return err
	}
	out := make([]webhookView, 0, len(eps))
	for _, e := range eps {
		out = append(out, webhookOf(e))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"webhooks": out})
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request) error {
	a, err := s.webhooks()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	stateOf(r).target = name
	e, err := a.Get(r.Context(), name)
	if err != nil {
		return webhookErr(name, err)
	}
	return writeJSON(w, http.StatusOK, webhookOf(e))
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) error {
	a, err := s.webhooks()
	if err != nil {
		return err
	}
	e, err := s.decodeWebhook(r)
	if err != nil {
		return err
	}
	st := stateOf(r)
	st.target = e.Name
	if err := a.Validate(e); err != nil {
		return webhookErr(e.Name, err)
	}
	if err := s.decide(r, &govern.Action{Webhook: webhookChange("create", e)}); err != nil {
		return err
	}
	e.CreatedBy = st.principal
	st.detail["url"], st.detail["events"] = e.URL, e.Events
	v, err := a.Create(r.Context(), e)
	if err != nil {
		return webhookErr(e.Name, err)
	}
	return writeJSON(w, http.StatusCreated, webhookOf(v))
}

// webhookTarget is what update, delete and test start with: the admin and
// the endpoint the path names (the request's target), refused when writable
// is asked and it comes from the config file.
func (s *Server) webhookTarget(r *http.Request, writable bool) (*webhook.Admin, webhook.Endpoint, error) {
	a, err := s.webhooks()
	if err != nil {
		return nil, webhook.Endpoint{}, err
	}
	name := r.PathValue("name")
	stateOf(r).target = name
	e, err := a.Get(r.Context(), name)
	if err != nil {
		return nil, webhook.Endpoint{}, webhookErr(name, err)
	}
	if writable && e.Source == webhook.SourceConfig {
		return nil, webhook.Endpoint{}, webhookErr(name, webhook.ErrReadOnly)
	}
	return a, e, nil
}

func (s *Server) updateWebhook(w http.ResponseWriter, r *http.Request) error {
	a, old, err := s.webhookTarget(r, true)
	if err != nil {
		return err
	}
	name, st := old.Name, stateOf(r)
	e, err := s.decodeWebhook(r)
	if err != nil {
		return err
	}
	if e.Name != "" && e.Name != name {
		return apierr.BadRequest("name %q: an endpoint cannot be renamed (the path names %s)", truncate(e.Name, 80), truncate(name, 80))
	}
	e.Name = name
	if err := a.Validate(e); err != nil {
		return webhookErr(name, err)
	}
	if err := s.decide(r, &govern.Action{Webhook: webhookChange("update", e)}); err != nil {
		return err
	}
	st.detail["url"], st.detail["events"], st.detail["enabled"] = e.URL, e.Events, e.Enabled
	v, err := a.Update(r.Context(), name, e)
	if err != nil {
		return webhookErr(name, err)
	}
	return writeJSON(w, http.StatusOK, webhookOf(v))
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) error {
	a, old, err := s.webhookTarget(r, true)
	if err != nil {
		return err
	}
	name := old.Name
	if err := s.decide(r, &govern.Action{Webhook: webhookChange("delete", old.WebhookEndpoint)}); err != nil {
		return err
	}
	if err := a.Delete(r.Context(), name); err != nil {
		return webhookErr(name, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) testWebhook(w http.ResponseWriter, r *http.Request) error {
	a, e, err := s.webhookTarget(r, false)
	if err != nil {
		return err
	}
	name, st := e.Name, stateOf(r)
	if err := s.decide(r, &govern.Action{Webhook: webhookChange("test", e.WebhookEndpoint)}); err != nil {
		return err
	}
	res, err := a.Test(r.Context(), name, st.principal)
	if err != nil {
		return webhookErr(name, err)
	}
	st.detail["ok"], st.detail["status_code"] = res.OK, res.StatusCode
	return writeJSON(w, http.StatusOK, res)
}
