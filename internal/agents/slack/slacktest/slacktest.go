// Package slacktest is a fake Slack for tests: it sends Events API
// requests signed as Slack signs them (or forged, stale, replayed), and
// serves a Web API (chat.postMessage) that records the calls.
package slacktest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warden-sandbox/warden/internal/agents/slack"
)

// Post is one chat.postMessage call the fake received.
type Post struct {
	Token    string // the bearer token it came with
	Channel  string
	Text     string
	ThreadTS string
	TS       string // the ts the fake answered
}

// Fake is a fake Slack workspace with one app.
type Fake struct {
	// Secret is the app's signing secret; Token the bot token the Web
	// API accepts; BotUserID the app's bot user.
	Secret    []byte
	Token     string
	BotUserID string
	// Now is the clock the fake signs with (default time.Now).
	Now func() time.Time

	srv   *httptest.Server
	mu    sync.Mutex
	posts []Post
	next  atomic.Int64
	wake  chan struct{}
}

// New starts a fake Slack; Close stops it.
func New(secret, token string) *Fake {
	f := &Fake{Secret: []byte(secret), Token: token, BotUserID: "U0BOT", wake: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/chat.postMessage", f.postMessage)
	f.srv = httptest.NewServer(mux)
	return f
}

// APIURL is the Web API's base URL (slack.Client.BaseURL).
func (f *Fake) APIURL() string { return f.srv.URL + "/api" }

// Close stops the fake.
func (f *Fake) Close() { f.srv.Close() }

func (f *Fake) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func answer(w http.ResponseWriter, v map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (f *Fake) postMessage(w http.ResponseWriter, r *http.Request) {
	tok, ok := bytes.CutPrefix([]byte(r.Header.Get("Authorization")), []byte("Bearer "))
	if !ok || string(tok) != f.Token {
		answer(w, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	var m slack.PostMessage
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&m); err != nil {
		answer(w, map[string]any{"ok": false, "error": "invalid_json"})
		return
	}
	if m.Channel == "" {
		answer(w, map[string]any{"ok": false, "error": "channel_not_found"})
		return
	}
	if m.Text == "" {
		answer(w, map[string]any{"ok": false, "error": "no_text"})
		return
	}
	ts := fmt.Sprintf("%d.%06d", f.now().Unix(), f.next.Add(1))
	f.mu.Lock()
	f.posts = append(f.posts, Post{Token: string(tok), Channel: m.Channel, Text: m.Text, ThreadTS: m.ThreadTS, TS: ts})
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
	answer(w, map[string]any{"ok": true, "channel": m.Channel, "ts": ts})
}

// Posts returns the chat.postMessage calls received so far.
func (f *Fake) Posts() []Post {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Post(nil), f.posts...)
}

// WaitPosts waits until at least n messages were posted or ctx ends.
func (f *Fake) WaitPosts(ctx context.Context, n int) ([]Post, error) {
	for {
		if p := f.Posts(); len(p) >= n {
			return p, nil
		}
		select {
		case <-f.wake:
		case <-ctx.Done():
			return f.Posts(), fmt.Errorf("slacktest: %d of %d posts: %w", len(f.Posts()), n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Mention returns an event_callback envelope of an app_mention by user in
// channel (threadTS "" for a top-level message).
func (f *Fake) Mention(eventID, user, channel, text, threadTS string) []byte {
	return f.envelope(eventID, slack.Event{Type: "app_mention", User: user, Text: "<@" + f.BotUserID + "> " + text,
		Channel: channel, ThreadTS: threadTS})
}

// DirectMessage returns an event_callback envelope of a direct message.
func (f *Fake) DirectMessage(eventID, user, channel, text string) []byte {
	return f.envelope(eventID, slack.Event{Type: "message", ChannelType: "im", User: user, Text: text, Channel: channel})
}

// BotMessage returns a direct-message event written by the app's own bot.
func (f *Fake) BotMessage(eventID, channel, text string) []byte {
	return f.envelope(eventID, slack.Event{Type: "message", ChannelType: "im", User: f.BotUserID, BotID: "B0BOT",
		Text: text, Channel: channel})
}

// URLVerification returns a url_verification request.
func (f *Fake) URLVerification(challenge string) []byte {
	b, _ := json.Marshal(map[string]string{"type": slack.TypeURLVerification, "token": "legacy", "challenge": challenge})
	return b
}

func (f *Fake) envelope(eventID string, ev slack.Event) []byte {
	now := f.now()
	ev.TS = fmt.Sprintf("%d.%06d", now.Unix(), f.next.Add(1))
	ev.EventTS = ev.TS
	b, _ := json.Marshal(map[string]any{"type": slack.TypeEventCallback, "team_id": "T0TEAM", "api_app_id": "A0APP",
		"event_id": eventID, "event_time": now.Unix(), "event": ev,
		"authorizations": []map[string]any{{"user_id": f.BotUserID, "is_bot": true}}})
	return b
}

// Request is one Events API delivery; zero fields mean: signed now with
// the fake's secret.
type Request struct {
	Body []byte
	// At is the request's timestamp (zero: now).
	At time.Time
	// Signature overrides the signature (a forgery); Secret signs with
	// another secret.
	Signature string
	Secret    []byte
	// Retry sets X-Slack-Retry-Num (and -Reason) as Slack's retries do.
	Retry int
	// Header, when set, is sent as is instead of the signing headers.
	Header http.Header
}

// Send delivers an Events API request to url as Slack does and returns
// the response's status and body.
func (f *Fake) Send(ctx context.Context, url string, req Request) (int, []byte, error) {
	at := req.At
	if at.IsZero() {
		at = f.now()
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	secret := f.Secret
	if req.Secret != nil {
		secret = req.Secret
	}
	sig := slack.Sign(secret, ts, req.Body)
	if req.Signature != "" {
		sig = req.Signature
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(req.Body))
	if err != nil {
		return 0, nil, err
	}
	if req.Header != nil {
		r.Header = req.Header.Clone()
	} else {
		r.Header.Set(slack.HeaderTimestamp, ts)
		r.Header.Set(slack.HeaderSignature, sig)
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
	if req.Retry > 0 {
		r.Header.Set(slack.HeaderRetryNum, strconv.Itoa(req.Retry))
		r.Header.Set("X-Slack-Retry-Reason", "http_timeout")
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}
