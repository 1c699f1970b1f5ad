package agents

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// Webhook signatures: the header SignatureHeader is "t=<unix seconds>,
// v1=<hex HMAC-SHA256(secret, t + "." + body)>". A request more than
// SignatureWindow off the daemon's clock is refused, and so is one whose
// signature (or Idempotency-Key) was already accepted within the window.
const (
	SignatureHeader = "X-Warden-Signature"
	SignatureWindow = 5 * time.Minute
)

// Errors of webhook verification.
var (
	ErrBadSignature = errors.New("bad webhook signature")
	ErrStale        = errors.New("webhook timestamp outside the accepted window")
	ErrReplayed     = errors.New("webhook already received")
)

// Sign returns the SignatureHeader value for body at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// VerifySignature checks header against body and secret at now.
func VerifySignature(secret, header string, body []byte, now time.Time) (sig string, err error) {
	var ts string
	var sigs []string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return "", fmt.Errorf("%w: want t=<unix>,v1=<hex>", ErrBadSignature)
	}
	at := time.Unix(sec, 0)
	if d := now.Sub(at); d > SignatureWindow || d < -SignatureWindow {
		return "", ErrStale
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		got, err := hex.DecodeString(s)
		if err == nil && hmac.Equal(got, want) {
			return ts + ":" + s, nil
		}
	}
	return "", ErrBadSignature
}

// replayCache remembers accepted signatures and idempotency keys for
// twice the window (a signature is only accepted within it).
type replayCache struct {
	mu   sync.Mutex
	seen map[string]time.Time // key -> forget after
}

// add records key, failing if it is already there.
func (c *replayCache) add(key string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]time.Time{}
	}
	for k, exp := range c.seen {
		if now.After(exp) {
			delete(c.seen, k)
		}
	}
	if _, ok := c.seen[key]; ok {
		return false
	}
	c.seen[key] = now.Add(2 * SignatureWindow)
	return true
}

// Webhook verifies a signed webhook for agent a (the zero Agent when the
// name is unknown, refused like a bad signature) and queues a run with the
// body as input (JSON as is, anything else as a JSON string).
func (s *Service) Webhook(ctx context.Context, a store.Agent, sigHeader, idemKey string, body []byte) (store.AgentRun, error) {
	now := s.now()
	secret := a.WebhookSecret
	enabled := false
	if a.ID != "" {
		if spec, err := ParseSpec(a.Spec); err == nil {
			enabled = spec.Triggers.Webhook
		}
	}
	if !enabled || secret == "" {
		// Spend the same work as a real check, then refuse.
		VerifySignature("no agent", sigHeader, body, now)
		return store.AgentRun{}, ErrBadSignature
	}
	sig, err := VerifySignature(secret, sigHeader, body, now)
	if err != nil {
		return store.AgentRun{}, err
	}
	if !s.replay.add(a.ID+"/sig/"+sig, now) {
		return store.AgentRun{}, ErrReplayed
	}
	if idemKey != "" && !s.replay.add(a.ID+"/idem/"+idemKey, now) {
		return store.AgentRun{}, ErrReplayed
	}
	input := json.RawMessage(body)
	if len(body) == 0 {
		input = json.RawMessage("null")
	} else if !json.Valid(body) {
		b, _ := json.Marshal(string(body))
		input = b
	}
	return s.Trigger(ctx, a, TriggerWebhook, "webhook", input)
}
