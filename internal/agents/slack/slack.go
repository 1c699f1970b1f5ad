// Package slack is what hosted agents need of Slack (docs/agents.md): the
// Events API's request verification (signing secret, v0 HMAC-SHA256 over
// "v0:timestamp:body", a five-minute window, constant-time compare), its
// url_verification handshake, parsing of app_mention and direct-message
// events with event_id deduplication for Slack's retries, and a Web API
// client for chat.postMessage whose bot token comes from a callback (the
// secrets store in wardend: never a sandbox). Package slacktest is a fake
// Slack for tests.
package slack

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Request headers of the Events API.
const (
	HeaderSignature = "X-Slack-Signature"
	HeaderTimestamp = "X-Slack-Request-Timestamp"
	HeaderRetryNum  = "X-Slack-Retry-Num"
)

// DefaultWindow is how far a request's timestamp may be from now.
const DefaultWindow = 5 * time.Minute

// MaxBody bounds an event request's body.
const MaxBody = 1 << 20

// Verification errors.
var (
	ErrMissing   = errors.New("slack: missing signature or timestamp header")
	ErrStale     = errors.New("slack: request timestamp outside the allowed window")
	ErrSignature = errors.New("slack: request signature does not match")
	ErrTooLarge  = errors.New("slack: request body too large")
)

// Sign returns the X-Slack-Signature of body sent at ts (unix seconds)
// under the signing secret: "v0=" + hex HMAC-SHA256(secret, "v0:ts:body").
func Sign(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("v0:" + ts + ":"))
	m.Write(body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

// Verifier checks that requests come from Slack.
type Verifier struct {
	// Secret is the app's signing secret.
	Secret []byte
	// Window is the allowed distance of a timestamp from now (default
	// DefaultWindow), either way.
	Window time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Verify checks a request's signature headers against its raw body.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	if len(v.Secret) == 0 {
		return errors.New("slack: no signing secret configured")
	}
	sig, ts := h.Get(HeaderSignature), h.Get(HeaderTimestamp)
	if sig == "" || ts == "" {
		return ErrMissing
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q is not unix seconds", ErrStale, ts)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	window := v.Window
	if window <= 0 {
		window = DefaultWindow
	}
	d := now().Sub(time.Unix(sec, 0))
	if d > window || d < -window {
		return ErrStale
	}
	if !hmac.Equal([]byte(Sign(v.Secret, ts, body)), []byte(sig)) {
		return ErrSignature
	}
	return nil
}

// ReadRequest reads a request's body (at most MaxBody bytes) and
// verifies it.
func (v *Verifier) ReadRequest(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("slack: read request: %w", err)
	}
	if len(body) > MaxBody {
		return nil, ErrTooLarge
	}
	if err := v.Verify(r.Header, body); err != nil {
		return nil, err
	}
	return body, nil
}

// Envelope is an Events API request: url_verification or event_callback.
type Envelope struct {
	Type      string `json:"type"`
	Challenge string `json:"challenge,omitempty"`
	TeamID    string `json:"team_id,omitempty"`
	APIAppID  string `json:"api_app_id,omitempty"`
	EventID   string `json:"event_id,omitempty"`
	EventTime int64  `json:"event_time,omitempty"`
	Event     *Event `json:"event,omitempty"`
	// Authorizations name the installation's bot user (its user_id).
	Authorizations []struct {
		UserID string `json:"user_id"`
		IsBot  bool   `json:"is_bot"`
	} `json:"authorizations,omitempty"`
}

// Event is the inner event of an event_callback.
type Event struct {
	Type        string `json:"type"` // app_mention, message
	Subtype     string `json:"subtype,omitempty"`
	User        string `json:"user,omitempty"`
	BotID       string `json:"bot_id,omitempty"`
	AppID       string `json:"app_id,omitempty"`
	Text        string `json:"text"`
	Channel     string `json:"channel"`
	ChannelType string `json:"channel_type,omitempty"` // im for direct messages
	TS          string `json:"ts"`
	ThreadTS    string `json:"thread_ts,omitempty"`
	EventTS     string `json:"event_ts,omitempty"`
}

// Envelope types.
const (
	TypeURLVerification = "url_verification"
	TypeEventCallback   = "event_callback"
)

// Parse decodes an Events API body.
func Parse(body []byte) (*Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, fmt.Errorf("slack: parse event: %w", err)
	}
	switch e.Type {
	case TypeURLVerification:
		if e.Challenge == "" {
			return nil, errors.New("slack: url_verification without a challenge")
		}
	case TypeEventCallback:
		if e.Event == nil || e.EventID == "" {
			return nil, errors.New("slack: event_callback without an event or event_id")
		}
	case "":
		return nil, errors.New("slack: parse event: no type")
	}
	return &e, nil
}

// Message is a message that should wake an agent: a mention of the bot or
// a direct message to it.
type Message struct {
	EventID string
	TeamID  string
	Kind    string // app_mention or im
	User    string
	Text    string
	Channel string
	TS      string
	// ThreadTS is the thread to reply in: the message's thread, else the
	// message itself (a reply starts a thread under it).
	ThreadTS string
}

// Message returns the message an event_callback carries for the agent,
// false for anything else: other event types, edits and other subtypes,
// and messages from bots (the app's own replies above all), unless the
// bot is in allowBots. botUserID is the app's bot user, whose own
// messages are never taken.
func (e *Envelope) Message(botUserID string, allowBots ...string) (Message, bool) {
	if e.Type != TypeEventCallback || e.Event == nil {
		return Message{}, false
	}
	ev := e.Event
	if botUserID == "" {
		for _, a := range e.Authorizations {
			if a.IsBot {
				botUserID = a.UserID
			}
		}
	}
	if ev.User != "" && ev.User == botUserID {
		return Message{}, false
	}
	if ev.BotID != "" || ev.Subtype == "bot_message" {
		allowed := false
		for _, b := range allowBots {
			if b != "" && b == ev.BotID {
				allowed = true
			}
		}
		if !allowed {
			return Message{}, false
		}
	}
	var kind string
	switch {
	case ev.Type == "app_mention":
		kind = "app_mention"
	case ev.Type == "message" && ev.ChannelType == "im":
		kind = "im"
	default:
		return Message{}, false
	}
	// Edits, deletions, joins...: not new messages.
	if ev.Subtype != "" && ev.Subtype != "bot_message" && ev.Subtype != "file_share" && ev.Subtype != "thread_broadcast" {
		return Message{}, false
	}
	thread := ev.ThreadTS
	if thread == "" {
		thread = ev.TS
	}
	return Message{EventID: e.EventID, TeamID: e.TeamID, Kind: kind, User: ev.User, Text: ev.Text,
		Channel: ev.Channel, TS: ev.TS, ThreadTS: thread}, true
}

// Deduper remembers event IDs for a while (Slack retries an event it got
// no timely 200 for, with the same event_id; a replayed request carries
// one already seen). Safe for concurrent use.
type Deduper struct {
	ttl  time.Duration
	max  int
	now  func() time.Time
	mu   sync.Mutex
	seen map[string]seenAt
	seq  uint64
}

// seenAt is when an ID was recorded; seq orders records of one instant.
type seenAt struct {
	at  time.Time
	seq uint64
}

func (a seenAt) before(b seenAt) bool {
	return a.at.Before(b.at) || (a.at.Equal(b.at) && a.seq < b.seq)
}

// NewDeduper returns a Deduper keeping IDs for ttl (default 24 h), at most
// max of them (default 100,000: the oldest go first). now is the clock
// (nil: time.Now).
func NewDeduper(ttl time.Duration, max int, now func() time.Time) *Deduper {
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	if max <= 0 {
		max = 100_000
	}
	if now == nil {
		now = time.Now
	}
	return &Deduper{ttl: ttl, max: max, now: now, seen: map[string]seenAt{}}
}

// Seen reports whether id was seen within the TTL, and records it.
func (d *Deduper) Seen(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	if t, ok := d.seen[id]; ok && now.Sub(t.at) < d.ttl {
		return true
	}
	delete(d.seen, id)
	if len(d.seen) >= d.max {
		var oldest string
		var ot seenAt
		for k, t := range d.seen {
			if now.Sub(t.at) >= d.ttl {
				delete(d.seen, k)
				continue
			}
			if oldest == "" || t.before(ot) {
				oldest, ot = k, t
			}
		}
		if len(d.seen) >= d.max {
			delete(d.seen, oldest)
		}
	}
	d.seq++
	d.seen[id] = seenAt{at: now, seq: d.seq}
	return false
}

// Handler serves an Events API request URL: it verifies the request
// (401 when it fails), answers url_verification with its challenge, and
// hands each new message for the bot to onMessage, which must return at
// once (Slack wants a 200 within 3 s: run the work asynchronously).
// Duplicates (by event_id) and events that are no message for the bot
// get a 200 and nothing else.
type Handler struct {
	Verifier  *Verifier
	Dedupe    *Deduper
	BotUserID string
	AllowBots []string
	OnMessage func(r *http.Request, m Message)
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeJSONError(w, http.StatusMethodNotAllowed, "method_not_allowed", "POST only")
		return
	}
	body, err := h.Verifier.ReadRequest(r)
	if err != nil {
		status, code := http.StatusUnauthorized, "unauthenticated"
		if errors.Is(err, ErrTooLarge) {
			status, code = http.StatusRequestEntityTooLarge, "too_large"
		}
		writeJSONError(w, status, code, err.Error())
		return
	}
	env, err := Parse(body)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "validation_failed", err.Error())
		return
	}
	if env.Type == TypeURLVerification {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"challenge": env.Challenge})
		return
	}
	if env.Type == TypeEventCallback && (h.Dedupe == nil || !h.Dedupe.Seen(env.EventID)) {
		if m, ok := env.Message(h.BotUserID, h.AllowBots...); ok && h.OnMessage != nil {
			h.OnMessage(r, m)
		}
	}
	w.WriteHeader(http.StatusOK)
}

func writeJSONError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var b struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	b.Error.Code, b.Error.Message = code, msg
	json.NewEncoder(w).Encode(b)
}

// trimBase returns base without a trailing slash.
func trimBase(base string) string { return strings.TrimRight(base, "/") }
