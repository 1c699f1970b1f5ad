// Package webhook delivers signed outgoing webhooks (docs/webhooks.md):
// each configured endpoint gets the audit events of the types it names,
// one POST per event, signed with HMAC-SHA256 in the Standard Webhooks
// format (webhook-id, webhook-timestamp, webhook-signature: v1,<base64>).
//
// The audit log is the queue: an endpoint's deliverer reads the events
// after its cursor (the seq of the last event it handled, kept in the
// store) in order, delivers the matching ones with retries and backoff,
// and moves the cursor after each. So the actions that wrote the events
// never wait on a receiver, and a delivery that did not succeed before a
// restart is made after it: at least once (a receiver deduplicates by
// webhook-id). A new endpoint starts at the log's head, not its history.
// Destinations are dialled through the safe dialer: loopback, private
// and metadata addresses are refused unless an admin allowed them.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/store"
)

// Header names of the Standard Webhooks format.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// TypeBudgetExceeded is the type derived for an llm.call refused by a
// budget.
const TypeBudgetExceeded = "llm.budget_exceeded"

// DefaultMaxAttempts bounds the tries of one delivery.
const DefaultMaxAttempts = 12

const (
	pageSize       = 200
	attemptTimeout = 15 * time.Second
	maxBackoff     = 10 * time.Minute
)

// Audit reads the audit log (store.Store).
type Audit interface {
	ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEvent, error)
}

// Secrets reads a secret's current value (*secrets.Vault).
type Secrets interface {
	Current(id string) ([]byte, int, error)
}

// Config configures a Dispatcher.
type Config struct {
	Endpoints []config.WebhookEndpoint
	Audit     Audit
	Cursors   store.WebhookStore
	Secrets   Secrets
	// Head returns the seq of the newest audit event: where a new
	// endpoint starts.
	Head func() int64
	// Client makes the deliveries: the safe dialer's client.
	Client *http.Client
	Log    *slog.Logger
	Now    func() time.Time
	// Poll is how often an idle deliverer looks for new events (1s when
	// 0); Notify wakes them sooner.
	Poll time.Duration
	// Backoff is the wait before retry n (1, 2, ...); nil: 1s doubling,
	// at most 10 minutes.
	Backoff func(n int) time.Duration
}

// Dispatcher runs one deliverer per endpoint: those of the config file
// from New on, and those started and stopped at run time (Start, Stop).
// Safe for concurrent use.
type Dispatcher struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	eps    map[string]*endpoint
	closed bool
}

// Endpoint sources.
const (
	SourceConfig = "config" // the config file: read-only through the API
	SourceAPI    = "api"    // made through the API, kept in the store
)

type endpoint struct {
	config.WebhookEndpoint
	source string
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	state store.WebhookCursor // the cursor and delivery state, as last written
}

// Status is an endpoint's delivery state.
type Status struct {
	Name    string   `json:"name"`
	Source  string   `json:"source"`
	URL     string   `json:"url"`
	Events  []string `json:"events"`
	Running bool     `json:"running"`
	// State is the cursor with the delivery state.
	State store.WebhookCursor `json:"-"`
}

// Check validates endpoint configuration (names, URLs, events).
func Check(eps []config.WebhookEndpoint, allowHTTP bool) error {
	seen := map[string]bool{}
	for i, e := range eps {
		switch {
		case e.Name == "" || strings.ContainsAny(e.Name, " /\t\n"):
			return fmt.Errorf("webhooks: endpoint %d: bad name %q", i, e.Name)
		case seen[e.Name]:
			return fmt.Errorf("webhooks: endpoint %s configured twice", e.Name)
		case e.Secret == "":
			return fmt.Errorf("webhooks: endpoint %s: secret (the ID of the signing key's secret) is required", e.Name)
		case len(e.Events) == 0:
			return fmt.Errorf("webhooks: endpoint %s: name at least one event type (or \"*\")", e.Name)
		case e.MaxAttempts < 0:
			return fmt.Errorf("webhooks: endpoint %s: max_attempts is negative", e.Name)
		}
		seen[e.Name] = true
		u, err := url.Parse(e.URL)
		if err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && allowHTTP)) {
			return fmt.Errorf("webhooks: endpoint %s: url %q is not an https URL (http needs allow_http)", e.Name, e.URL)
		}
		for _, p := range e.Events {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				return fmt.Errorf("webhooks: endpoint %s: bad event pattern %q", e.Name, p)
			}
		}
		for _, o := range e.Outcomes {
			if o != "success" && o != "denied" && o != "error" {
				return fmt.Errorf("webhooks: endpoint %s: outcome %q: want success, denied or error", e.Name, o)
			}
		}
	}
	return nil
}

// New checks cfg and starts the deliverers of cfg.Endpoints; Close stops
// every deliverer.
func New(cfg Config) (*Dispatcher, error) {
	if cfg.Audit == nil || cfg.Cursors == nil || cfg.Secrets == nil || cfg.Client == nil {
		return nil, errors.New("webhooks: no audit log, cursor store, secrets or HTTP client")
	}
	if err := Check(cfg.Endpoints, true); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func(n int) time.Duration { return min(time.Second<<min(n-1, 20), maxBackoff) }
	}
	d := &Dispatcher{cfg: cfg, log: cfg.Log, eps: map[string]*endpoint{}}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	for _, e := range cfg.Endpoints {
		if err := d.Start(e, SourceConfig); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// ErrRunning is Start's error for a name that has a deliverer already.
var ErrRunning = errors.New("webhooks: the endpoint has a deliverer already")

// Start starts the deliverer of one endpoint. A new endpoint's cursor is
// set to the log's head before Start returns, so it gets every event
// written after.
func (d *Dispatcher) Start(e config.WebhookEndpoint, source string) error {
	if err := Check([]config.WebhookEndpoint{e}, true); err != nil {
		return err
	}
	if e.MaxAttempts == 0 {
		e.MaxAttempts = DefaultMaxAttempts
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("webhooks: the dispatcher is closed")
	}
	if d.eps[e.Name] != nil {
		return fmt.Errorf("%w: %s", ErrRunning, e.Name)
	}
	ctx, cancel := context.WithCancel(d.ctx)
	ep := &endpoint{WebhookEndpoint: e, source: source, wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	ep.state.Endpoint = e.Name
	ready := false
	if c, err := d.cursor(ctx, ep); err == nil {
		ep.state, ready = c, true
	} else {
		d.log.Error("webhook: read cursor", "endpoint", ep.Name, "err", err) // the deliverer tries again
	}
	d.eps[e.Name] = ep
	go d.run(ctx, ep, ready)
	return nil
}

// Stop stops an endpoint's deliverer and waits for it to end (a delivery
// in flight is cut: it is made again when the endpoint starts again).
// False: it had none.
func (d *Dispatcher) Stop(name string) bool {
	d.mu.Lock()
	ep := d.eps[name]
	delete(d.eps, name)
	d.mu.Unlock()
	if ep == nil {
		return false
	}
	ep.cancel()
	<-ep.done
	return true
}

// Notify wakes the deliverers (new audit events were written).
func (d *Dispatcher) Notify() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ep := range d.eps {
		select {
		case ep.wake <- struct{}{}:
		default:
		}
	}
}

// Close stops every deliverer; a delivery in flight is cut and made
// again after the next start.
func (d *Dispatcher) Close() {
	d.mu.Lock()
	d.closed = true
	eps := make([]*endpoint, 0, len(d.eps))
	for _, ep := range d.eps {
		eps = append(eps, ep) // kept: Status still reports them
	}
	d.mu.Unlock()
	d.cancel()
	for _, ep := range eps {
		<-ep.done
	}
}

// Status returns each running endpoint's delivery state, by name.
func (d *Dispatcher) Status() []Status {
	d.mu.Lock()
	eps := make([]*endpoint, 0, len(d.eps))
	for _, ep := range d.eps {
		eps = append(eps, ep)
	}
	d.mu.Unlock()
	slices.SortFunc(eps, func(a, b *endpoint) int { return strings.Compare(a.Name, b.Name) })
	out := make([]Status, 0, len(eps))
	for _, ep := range eps {
		out = append(out, ep.status())
	}
	return out
}

// StatusOf returns a running endpoint's delivery state (false: none runs
// under the name).
func (d *Dispatcher) StatusOf(name string) (Status, bool) {
	d.mu.Lock()
	ep := d.eps[name]
	d.mu.Unlock()
	if ep == nil {
		return Status{}, false
	}
	return ep.status(), true
}

func (ep *endpoint) status() Status {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return Status{Name: ep.Name, Source: ep.source, URL: ep.URL, Events: ep.Events, Running: true, State: ep.state}
}

func (d *Dispatcher) run(ctx context.Context, ep *endpoint, ready bool) {
	defer close(ep.done)
	for !ready {
		if !d.sleep(ctx, ep, d.cfg.Poll*10) {
			return
		}
		c, err := d.cursor(ctx, ep)
		if err != nil {
			d.log.Error("webhook: read cursor", "endpoint", ep.Name, "err", err)
			continue
		}
		ep.mu.Lock()
		ep.state, ready = c, true
		ep.mu.Unlock()
	}
	ep.mu.Lock()
	cur := ep.state.Seq
	ep.mu.Unlock()
	for {
		evs, err := d.cfg.Audit.ListAudit(ctx, store.AuditFilter{After: cur, Limit: pageSize})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Error("webhook: read the audit log", "endpoint", ep.Name, "err", err)
		}
		moved := false
		for _, ev := range evs {
			if t, ok := ep.match(ev); ok {
				if !d.deliver(ctx, ep, t, ev) {
					return // stopping: the event is delivered after the restart
				}
				cur, moved = ev.Seq, false // deliver saved the cursor
				continue
			}
			cur, moved = ev.Seq, true
		}
		if moved {
			d.update(ep, func(c *store.WebhookCursor) { c.Seq = cur })
		}
		if len(evs) == pageSize {
			continue
		}
		if !d.sleep(ctx, ep, d.cfg.Poll) {
			return
		}
	}
}

// cursor reads the endpoint's cursor, or sets a new one at the log's head.
func (d *Dispatcher) cursor(ctx context.Context, ep *endpoint) (store.WebhookCursor, error) {
	c, err := d.cfg.Cursors.WebhookCursor(ctx, ep.Name)
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return c, err
	}
	var head int64
	if d.cfg.Head != nil {
		head = d.cfg.Head()
	}
	c = store.WebhookCursor{Endpoint: ep.Name, Seq: head, UpdatedAt: d.cfg.Now()}
	if err := d.cfg.Cursors.SetWebhookCursor(ctx, c); err != nil {
		return c, err
	}
	return c, nil
}

// update changes the endpoint's state and writes it (cursor and delivery
// state in one row).
func (d *Dispatcher) update(ep *endpoint, fn func(*store.WebhookCursor)) {
	ep.mu.Lock()
	fn(&ep.state)
	ep.state.UpdatedAt = d.cfg.Now()
	c := ep.state
	ep.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), 10*time.Second)
	defer cancel()
	if err := d.cfg.Cursors.SetWebhookCursor(ctx, c); err != nil {
		// The event may be delivered again after a restart: at least once.
		d.log.Error("webhook: save cursor", "endpoint", ep.Name, "seq", c.Seq, "err", err)
	}
}

// sleep waits for a wake-up, the poll interval or the stop; false: stop.
func (d *Dispatcher) sleep(ctx context.Context, ep *endpoint, dur time.Duration) bool {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-ep.wake:
	case <-t.C:
	}
	return true
}

// Types returns the event types of an audit event: its action, and
// llm.budget_exceeded for an llm.call a budget refused.
func Types(ev store.AuditEvent) []string {
	ts := []string{ev.Action}
	if ev.Action == "llm.call" && ev.Outcome == "denied" && bytes.Contains(ev.Detail, []byte(`"budget"`)) {
		var d struct {
			Budget string `json:"budget"`
		}
		if json.Unmarshal(ev.Detail, &d) == nil && d.Budget != "" {
			ts = append(ts, TypeBudgetExceeded)
		}
	}
	return ts
}

// match returns the type the endpoint gets the event as, if any (the
// most specific: a derived type before the action).
func (ep *endpoint) match(ev store.AuditEvent) (string, bool) {
	if len(ep.Outcomes) > 0 && !slices.Contains(ep.Outcomes, ev.Outcome) {
		return "", false
	}
	ts := Types(ev)
	for i := len(ts) - 1; i >= 0; i-- {
		for _, p := range ep.Events {
			if ok, _ := path.Match(p, ts[i]); ok {
				return ts[i], true
			}
		}
	}
	return "", false
}

// Payload is the body of a delivery.
type Payload struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      EventData `json:"data"`
}

// EventData is the audit event delivered (as GET /v1/audit shows it).
type EventData struct {
	Seq         int64           `json:"seq"`
	Time        time.Time       `json:"time"`
	RequestID   string          `json:"request_id,omitempty"`
	PrincipalID string          `json:"principal_id"`
	Action      string          `json:"action"`
	Target      string          `json:"target"`
	Outcome     string          `json:"outcome"`
	Detail      json.RawMessage `json:"detail,omitempty"`
	Hash        string          `json:"hash"`
}

// MessageID is the webhook-id of the delivery of audit event seq: the
// same on every try, so a receiver can drop repeats.
func MessageID(seq int64) string { return "msg_audit_" + strconv.FormatInt(seq, 10) }

// deliver makes the delivery, retrying with backoff until it succeeds or
// is given up on, and moves the cursor past the event (false only when
// stopping: the cursor stays).
func (d *Dispatcher) deliver(ctx context.Context, ep *endpoint, typ string, ev store.AuditEvent) bool {
	body, err := json.Marshal(Payload{Type: typ, Timestamp: ev.Time.UTC(), Data: EventData{Seq: ev.Seq, Time: ev.Time.UTC(),
		RequestID: ev.RequestID, PrincipalID: ev.PrincipalID, Action: ev.Action, Target: ev.Target, Outcome: ev.Outcome,
		Detail: ev.Detail, Hash: ev.Hash}})
	if err != nil {
		d.giveUp(ep, ev, "cannot encode the event: "+err.Error(), 0)
		return true
	}
	id := MessageID(ev.Seq)
	for n := 1; ; n++ {
		code, permanent, err := d.try(ctx, ep, id, body)
		if err == nil {
			d.update(ep, func(c *store.WebhookCursor) {
				now := d.cfg.Now().UTC()
				c.Seq, c.Delivered, c.Attempts = ev.Seq, c.Delivered+1, 0
				c.LastAttemptAt, c.LastDeliveredAt, c.LastStatus, c.LastError = now, now, code, ""
			})
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		last := err.Error()
		if permanent || n >= ep.MaxAttempts {
			d.giveUp(ep, ev, last, code)
			return true
		}
		d.update(ep, func(c *store.WebhookCursor) {
			c.Attempts, c.LastAttemptAt, c.LastStatus, c.LastError = n, d.cfg.Now().UTC(), code, last
		})
		d.log.Warn("webhook: delivery failed; retrying", "endpoint", ep.Name, "seq", ev.Seq, "attempt", n, "err", last)
		t := time.NewTimer(d.cfg.Backoff(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

func (d *Dispatcher) giveUp(ep *endpoint, ev store.AuditEvent, why string, code int) {
	d.update(ep, func(c *store.WebhookCursor) {
		c.Seq, c.GivenUp, c.Attempts = ev.Seq, c.GivenUp+1, 0
		c.LastAttemptAt, c.LastStatus, c.LastError = d.cfg.Now().UTC(), code, why
	})
	d.log.Error("webhook: delivery given up", "endpoint", ep.Name, "seq", ev.Seq, "action", ev.Action, "err", why)
}

// try makes one delivery attempt: the receiver's status (0 when none
// answered); permanent reports a refusal that a retry cannot fix (a
// destination the dialer refuses).
func (d *Dispatcher) try(ctx context.Context, ep *endpoint, id string, body []byte) (code int, permanent bool, err error) {
	key, err := d.key(ep.Secret)
	if err != nil {
		return 0, false, err // the secret may be put later
	}
	return post(ctx, d.cfg.Client, ep.URL, key, id, strconv.FormatInt(d.cfg.Now().Unix(), 10), body)
}

// post makes one signed POST.
func post(ctx context.Context, client *http.Client, u string, key []byte, id, ts string, body []byte) (code int, permanent bool, err error) {
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, true, fmt.Errorf("bad url: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "warden-webhooks/1")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, "v1,"+Sign(key, id, ts, body))
	resp, err := client.Do(req)
	if err != nil {
		var denied *safedial.DeniedError
		if errors.As(err, &denied) {
			return 0, true, fmt.Errorf("destination refused: %w", denied)
		}
		return 0, false, fmt.Errorf("post: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, false, fmt.Errorf("the receiver answered %d", resp.StatusCode)
	}
	return resp.StatusCode, false, nil
}

// TypeTest is the type of the ping Test sends.
const TypeTest = "webhook.test"

// TestResult is what a test ping got.
type TestResult struct {
	MessageID  string `json:"message_id"`
	OK         bool   `json:"ok"`                    // the receiver answered 2xx
	StatusCode int    `json:"status_code,omitempty"` // the receiver's answer; 0: none
	Error      string `json:"error,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// Test sends one signed webhook.test ping to e's URL now, whether or not
// it has a deliverer, and reports the receiver's answer. It touches no
// cursor and is not retried.
func (d *Dispatcher) Test(ctx context.Context, e config.WebhookEndpoint, by string) TestResult {
	var rnd [8]byte
	rand.Read(rnd[:])
	res := TestResult{MessageID: "msg_test_" + hex.EncodeToString(rnd[:])}
	now := d.cfg.Now()
	body, _ := json.Marshal(map[string]any{"type": TypeTest, "timestamp": now.UTC(),
		"data": map[string]any{"endpoint": e.Name, "principal_id": by}})
	key, err := d.key(e.Secret)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	code, _, err := post(ctx, d.cfg.Client, e.URL, key, res.MessageID, strconv.FormatInt(now.Unix(), 10), body)
	res.DurationMS = d.cfg.Now().Sub(now).Milliseconds()
	res.StatusCode, res.OK = code, err == nil
	if err != nil {
		res.Error = err.Error()
	}
	return res
}

// key reads an endpoint's signing key.
func (d *Dispatcher) key(secret string) ([]byte, error) {
	v, _, err := d.cfg.Secrets.Current(secret)
	if err != nil {
		return nil, fmt.Errorf("read the signing key (secret %s): %w", secret, err)
	}
	return ParseKey(v)
}

// ParseKey reads a signing key: "whsec_<base64>" or the raw key (at
// least 16 bytes).
func ParseKey(v []byte) ([]byte, error) {
	v = bytes.TrimSpace(v)
	if b64, ok := bytes.CutPrefix(v, []byte("whsec_")); ok {
		k, err := base64.StdEncoding.DecodeString(string(b64))
		if err != nil || len(k) < 16 {
			return nil, errors.New("the signing key is not whsec_ and at least 16 bytes in base64")
		}
		return k, nil
	}
	if len(v) < 16 {
		return nil, errors.New("the signing key is shorter than 16 bytes")
	}
	return v, nil
}

// Sign returns the base64 HMAC-SHA256 of "id.timestamp.body" under key:
// the Standard Webhooks v1 signature.
func Sign(key []byte, id, ts string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Verify checks a delivery's headers against key (for receivers and
// tests): a v1 signature among the space-separated ones must match, and
// the timestamp be within tolerance of now.
func Verify(key []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts := h.Get(HeaderID), h.Get(HeaderTimestamp)
	if id == "" || ts == "" {
		return errors.New("webhook-id or webhook-timestamp missing")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not a number")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("webhook-timestamp is out of tolerance")
	}
	want := Sign(key, id, ts, body)
	for _, s := range strings.Fields(h.Get(HeaderSignature)) {
		if v, ok := strings.CutPrefix(s, "v1,"); ok && hmac.Equal([]byte(v), []byte(want)) {
			return nil
		}
	}
	return errors.New("no matching v1 signature")
}
