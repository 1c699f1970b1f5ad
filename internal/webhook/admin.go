package webhook

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/store"
)

// Admin manages the endpoints made through the API (kept in the store)
// next to those of the config file (read-only), keeping the dispatcher's
// deliverers in step: an endpoint created or enabled starts delivering at
// once, one deleted or disabled stops, without a restart.
type Admin struct {
	d         *Dispatcher
	st        store.WebhookEndpointStore
	config    []config.WebhookEndpoint
	checkURL  func(string) error
	allowHTTP bool
	now       func() time.Time

	mu sync.Mutex // serializes changes: the store and the deliverers move together
}

// AdminConfig configures an Admin.
type AdminConfig struct {
	Dispatcher *Dispatcher
	Store      store.WebhookEndpointStore
	// Config are the endpoints of the config file.
	Config []config.WebhookEndpoint
	// CheckURL is the destination check of a URL at create and update
	// time (the safe dialer's static check); AllowHTTP admits http URLs.
	CheckURL  func(string) error
	AllowHTTP bool
}

// InvalidError is a definition the Admin refuses (a bad request).
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

// Errors of the Admin besides *InvalidError and store.ErrNotFound.
var (
	// ErrReadOnly: the endpoint comes from the config file.
	ErrReadOnly = errors.New("the endpoint is configured in the config file: change it there")
	// ErrExists: the name is taken.
	ErrExists = errors.New("an endpoint with this name exists")
)

// MaxAttemptsLimit bounds an API endpoint's max_attempts.
const MaxAttemptsLimit = 100

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// NewAdmin returns an Admin; Start starts the stored endpoints.
func NewAdmin(cfg AdminConfig) (*Admin, error) {
	if cfg.Dispatcher == nil || cfg.Store == nil || cfg.CheckURL == nil {
		return nil, errors.New("webhooks admin: no dispatcher, store or URL check")
	}
	return &Admin{d: cfg.Dispatcher, st: cfg.Store, config: cfg.Config, checkURL: cfg.CheckURL,
		allowHTTP: cfg.AllowHTTP, now: cfg.Dispatcher.cfg.Now}, nil
}

// Endpoint is an endpoint as the API shows it: its definition, where it
// comes from and its delivery state.
type Endpoint struct {
	store.WebhookEndpoint
	Source  string // SourceConfig or SourceAPI
	Running bool   // a deliverer runs for it
	// State is the cursor and delivery state (Endpoint "" when the
	// endpoint has none yet).
	State store.WebhookCursor
}

func (a *Admin) configured(name string) (config.WebhookEndpoint, bool) {
	i := slices.IndexFunc(a.config, func(e config.WebhookEndpoint) bool { return e.Name == name })
	if i < 0 {
		return config.WebhookEndpoint{}, false
	}
	return a.config[i], true
}

// Start starts the deliverers of the stored, enabled endpoints. One named
// like an endpoint of the config file is left stopped (logged): the
// config file's wins.
func (a *Admin) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	eps, err := a.st.ListWebhookEndpoints(ctx)
	if err != nil {
		return fmt.Errorf("webhooks: list endpoints: %w", err)
	}
	for _, e := range eps {
		if _, ok := a.configured(e.Name); ok {
			a.d.log.Error("webhook: a stored endpoint is named like one of the config file; the config file's is used", "endpoint", e.Name)
			continue
		}
		if !e.Enabled {
			continue
		}
		if err := a.d.Start(runtimeOf(e), SourceAPI); err != nil {
			a.d.log.Error("webhook: start a stored endpoint", "endpoint", e.Name, "err", err)
		}
	}
	return nil
}

func runtimeOf(e store.WebhookEndpoint) config.WebhookEndpoint {
	return config.WebhookEndpoint{Name: e.Name, URL: e.URL, Secret: e.SecretID, Events: e.Events, Outcomes: e.Outcomes,
		MaxAttempts: e.MaxAttempts}
}

func (a *Admin) view(ctx context.Context, e store.WebhookEndpoint, source string) (Endpoint, error) {
	v := Endpoint{WebhookEndpoint: e, Source: source}
	if v.MaxAttempts == 0 {
		v.MaxAttempts = DefaultMaxAttempts
	}
	if s, ok := a.d.StatusOf(e.Name); ok && s.Source == source {
		v.Running, v.State = true, s.State
		return v, nil
	}
	c, err := a.d.cfg.Cursors.WebhookCursor(ctx, e.Name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return v, err
	}
	if err == nil {
		v.State = c
	}
	return v, nil
}

func configEndpoint(e config.WebhookEndpoint) store.WebhookEndpoint {
	return store.WebhookEndpoint{Name: e.Name, URL: e.URL, SecretID: e.Secret, Events: e.Events, Outcomes: e.Outcomes,
		MaxAttempts: e.MaxAttempts, Enabled: true}
}

// List returns every endpoint, the config file's first, each by name.
func (a *Admin) List(ctx context.Context) ([]Endpoint, error) {
	out := []Endpoint{}
	for _, e := range a.config {
		v, err := a.view(ctx, configEndpoint(e), SourceConfig)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(x, y Endpoint) int { return strings.Compare(x.Name, y.Name) })
	eps, err := a.st.ListWebhookEndpoints(ctx)
	if err != nil {
		return nil, err
	}
	for _, e := range eps {
		if _, ok := a.configured(e.Name); ok {
			continue
		}
		v, err := a.view(ctx, e, SourceAPI)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Get returns one endpoint (store.ErrNotFound when there is none).
func (a *Admin) Get(ctx context.Context, name string) (Endpoint, error) {
	if e, ok := a.configured(name); ok {
		return a.view(ctx, configEndpoint(e), SourceConfig)
	}
	e, err := a.st.GetWebhookEndpoint(ctx, name)
	if err != nil {
		return Endpoint{}, err
	}
	return a.view(ctx, e, SourceAPI)
}

// Validate checks a definition made through the API: its name, events,
// outcomes, attempts and the destination check of its URL.
func (a *Admin) Validate(e store.WebhookEndpoint) error {
	if !nameRE.MatchString(e.Name) {
		return &InvalidError{fmt.Sprintf("name %q: want 1-63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", e.Name)}
	}
	if e.MaxAttempts < 0 || e.MaxAttempts > MaxAttemptsLimit {
		return &InvalidError{fmt.Sprintf("max_attempts %d: want 0 (the default, %d) to %d", e.MaxAttempts, DefaultMaxAttempts, MaxAttemptsLimit)}
	}
	if err := Check([]config.WebhookEndpoint{runtimeOf(e)}, a.allowHTTP); err != nil {
		return &InvalidError{err.Error()}
	}
	if err := a.checkURL(e.URL); err != nil {
		return &InvalidError{fmt.Sprintf("webhooks: endpoint %s: url %q: %v", e.Name, e.URL, err)}
	}
	return nil
}

// Create stores a new endpoint and, when enabled, starts delivering to it
// the events written from now on.
func (a *Admin) Create(ctx context.Context, e store.WebhookEndpoint) (Endpoint, error) {
	if err := a.Validate(e); err != nil {
		return Endpoint{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.configured(e.Name); ok {
		return Endpoint{}, fmt.Errorf("%w: %s is configured in the config file", ErrExists, e.Name)
	}
	now := a.now().UTC()
	e.CreatedAt, e.UpdatedAt = now, now
	if err := a.st.CreateWebhookEndpoint(ctx, e); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return Endpoint{}, fmt.Errorf("%w: %s", ErrExists, e.Name)
		}
		return Endpoint{}, err
	}
	if e.Enabled {
		if err := a.d.Start(runtimeOf(e), SourceAPI); err != nil {
			// Nothing half made: the endpoint goes again.
			if derr := a.st.DeleteWebhookEndpoint(context.WithoutCancel(ctx), e.Name); derr != nil {
				a.d.log.Error("webhook: remove an endpoint that did not start", "endpoint", e.Name, "err", derr)
			}
			return Endpoint{}, fmt.Errorf("start the deliverer: %w", err)
		}
	}
	return a.view(ctx, e, SourceAPI)
}

// Update replaces an API endpoint's definition (its name and creation
// stay) and restarts its deliverer, which keeps its cursor.
func (a *Admin) Update(ctx context.Context, name string, e store.WebhookEndpoint) (Endpoint, error) {
	if _, ok := a.configured(name); ok {
		return Endpoint{}, ErrReadOnly
	}
	e.Name = name
	if err := a.Validate(e); err != nil {
		return Endpoint{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.st.GetWebhookEndpoint(ctx, name); err != nil {
		return Endpoint{}, err
	}
	a.d.Stop(name)
	up, err := a.st.UpdateWebhookEndpoint(ctx, name, func(old *store.WebhookEndpoint) error {
		e.CreatedAt, e.CreatedBy, e.UpdatedAt = old.CreatedAt, old.CreatedBy, a.now().UTC()
		*old = e
		return nil
	})
	if err != nil {
		// The old definition stays: its deliverer starts again.
		if old, gerr := a.st.GetWebhookEndpoint(context.WithoutCancel(ctx), name); gerr == nil && old.Enabled {
			_ = a.d.Start(runtimeOf(old), SourceAPI)
		}
		return Endpoint{}, err
	}
	if up.Enabled {
		if err := a.d.Start(runtimeOf(up), SourceAPI); err != nil {
			return Endpoint{}, fmt.Errorf("start the deliverer: %w", err)
		}
	}
	return a.view(ctx, up, SourceAPI)
}

// Delete stops an API endpoint's deliverer and removes it with its cursor
// and delivery state.
func (a *Admin) Delete(ctx context.Context, name string) error {
	if _, ok := a.configured(name); ok {
		return ErrReadOnly
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.st.GetWebhookEndpoint(ctx, name); err != nil {
		return err
	}
	a.d.Stop(name)
	return a.st.DeleteWebhookEndpoint(ctx, name)
}

// Test sends a signed webhook.test ping to the endpoint now (disabled
// ones too) and reports the receiver's answer.
func (a *Admin) Test(ctx context.Context, name, by string) (TestResult, error) {
	e, err := a.Get(ctx, name)
	if err != nil {
		return TestResult{}, err
	}
	return a.d.Test(ctx, runtimeOf(e.WebhookEndpoint), by), nil
}
