package slack_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/agents/slack"
	"github.com/warden-sandbox/warden/internal/agents/slack/slacktest"
)

const secret = "8f742231b10e8888abcd99yyyzzz85a5"

// TestSignKnownVector checks Sign against the example of Slack's
// documentation ("Verifying requests from Slack").
func TestSignKnownVector(t *testing.T) {
	body := "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	got := slack.Sign([]byte(secret), "1531420618", []byte(body))
	if want := "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"; got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

type harness struct {
	fake *slacktest.Fake
	srv  *httptest.Server
	now  time.Time
	mu   sync.Mutex
	got  []slack.Message
}

func newHarness(t *testing.T) *harness {
	h := &harness{now: time.Unix(1_800_000_000, 0)}
	h.fake = slacktest.New(secret, "xoxb-test-token")
	h.fake.Now = func() time.Time { return h.now }
	v := &slack.Verifier{Secret: []byte(secret), Now: func() time.Time { return h.now }}
	handler := &slack.Handler{Verifier: v, Dedupe: slack.NewDeduper(0, 0, func() time.Time { return h.now }),
		OnMessage: func(_ *http.Request, m slack.Message) {
			h.mu.Lock()
			h.got = append(h.got, m)
			h.mu.Unlock()
		}}
	h.srv = httptest.NewServer(handler)
	t.Cleanup(func() { h.srv.Close(); h.fake.Close() })
	return h
}

func (h *harness) messages() []slack.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slack.Message(nil), h.got...)
}

func (h *harness) send(t *testing.T, req slacktest.Request) (int, []byte) {
	t.Helper()
	code, body, err := h.fake.Send(t.Context(), h.srv.URL, req)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

func TestURLVerification(t *testing.T) {
	h := newHarness(t)
	code, body := h.send(t, slacktest.Request{Body: h.fake.URLVerification("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P")})
	var out map[string]string
	if code != http.StatusOK || json.Unmarshal(body, &out) != nil || out["challenge"] != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
		t.Fatalf("url_verification = %d %s", code, body)
	}
	// Unsigned, the challenge is not echoed.
	code, body = h.send(t, slacktest.Request{Body: h.fake.URLVerification("x"), Header: http.Header{}})
	if code != http.StatusUnauthorized || strings.Contains(string(body), `"challenge"`) {
		t.Fatalf("unsigned url_verification = %d %s", code, body)
	}
}

func TestForgedAndStaleRefused(t *testing.T) {
	h := newHarness(t)
	body := h.fake.Mention("Ev1", "U1", "C1", "hello", "")
	cases := []struct {
		name string
		req  slacktest.Request
		want error
	}{
		{"other secret", slacktest.Request{Body: body, Secret: []byte("not-the-secret")}, slack.ErrSignature},
		{"forged signature", slacktest.Request{Body: body, Signature: "v0=" + strings.Repeat("ab", 32)}, slack.ErrSignature},
		{"six minutes old", slacktest.Request{Body: body, At: h.now.Add(-6 * time.Minute)}, slack.ErrStale},
		{"six minutes ahead", slacktest.Request{Body: body, At: h.now.Add(6 * time.Minute)}, slack.ErrStale},
		{"no headers", slacktest.Request{Body: body, Header: http.Header{}}, slack.ErrMissing},
	}
	for _, c := range cases {
		code, resp := h.send(t, c.req)
		if code != http.StatusUnauthorized || !strings.Contains(string(resp), c.want.Error()) {
			t.Errorf("%s: %d %s, want 401 %q", c.name, code, resp, c.want)
		}
	}
	// A changed byte breaks the signature.
	ts := "1800000000"
	hd := http.Header{}
	hd.Set(slack.HeaderTimestamp, ts)
	hd.Set(slack.HeaderSignature, slack.Sign([]byte(secret), ts, body))
	tampered := []byte(strings.Replace(string(body), "hello", "hellO", 1))
	if code, resp := h.send(t, slacktest.Request{Body: tampered, Header: hd}); code != http.StatusUnauthorized {
		t.Errorf("tampered body: %d %s", code, resp)
	}
	if n := len(h.messages()); n != 0 {
		t.Fatalf("%d messages got through", n)
	}
	// Within the window it is accepted.
	if code, resp := h.send(t, slacktest.Request{Body: body, At: h.now.Add(-4 * time.Minute)}); code != http.StatusOK {
		t.Fatalf("four minutes old: %d %s", code, resp)
	}
	if n := len(h.messages()); n != 1 {
		t.Fatalf("%d messages, want 1", n)
	}
	v := &slack.Verifier{Secret: []byte(secret), Now: func() time.Time { return h.now }}
	if err := v.Verify(http.Header{slack.HeaderSignature: {"v0=00"}, slack.HeaderTimestamp: {"soon"}}, body); !errors.Is(err, slack.ErrStale) {
		t.Fatalf("non-numeric timestamp: %v", err)
	}
}

func TestReplayAndRetryDeduped(t *testing.T) {
	h := newHarness(t)
	body := h.fake.Mention("Ev42", "U1", "C1", "deploy please", "")
	for i, req := range []slacktest.Request{{Body: body}, {Body: body}, {Body: body, Retry: 1}} {
		if code, resp := h.send(t, req); code != http.StatusOK {
			t.Fatalf("delivery %d: %d %s", i, code, resp)
		}
	}
	if got := h.messages(); len(got) != 1 || got[0].EventID != "Ev42" {
		t.Fatalf("messages = %+v, want one", got)
	}
	// The same signed request replayed after the window is refused.
	h.now = h.now.Add(6 * time.Minute)
	req := slacktest.Request{Body: body, At: h.now.Add(-6 * time.Minute)}
	if code, _ := h.send(t, req); code != http.StatusUnauthorized {
		t.Fatalf("replay after 6 minutes: %d", code)
	}
	// A new event is taken.
	if code, _ := h.send(t, slacktest.Request{Body: h.fake.Mention("Ev43", "U1", "C1", "again", "")}); code != http.StatusOK {
		t.Fatal(code)
	}
	if n := len(h.messages()); n != 2 {
		t.Fatalf("%d messages, want 2", n)
	}
}

func TestDeduperExpiresAndBounds(t *testing.T) {
	now := time.Unix(0, 0)
	d := slack.NewDeduper(time.Hour, 2, func() time.Time { return now })
	if d.Seen("a") || !d.Seen("a") {
		t.Fatal("a not remembered")
	}
	now = now.Add(2 * time.Hour)
	if d.Seen("a") {
		t.Fatal("a remembered past the TTL")
	}
	d.Seen("b")
	d.Seen("c") // over max: the oldest (a) goes
	if d.Seen("a") {
		t.Fatal("a kept beyond max")
	}
}

func TestMessagesTaken(t *testing.T) {
	f := slacktest.New(secret, "x")
	defer f.Close()
	parse := func(b []byte) *slack.Envelope {
		e, err := slack.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	m, ok := parse(f.Mention("Ev1", "U1", "C1", "hi", "")).Message("")
	if !ok || m.Kind != "app_mention" || m.ThreadTS != m.TS || m.Channel != "C1" || m.User != "U1" {
		t.Fatalf("mention = %+v %v", m, ok)
	}
	m, ok = parse(f.Mention("Ev2", "U1", "C1", "in thread", "1700000000.000100")).Message("")
	if !ok || m.ThreadTS != "1700000000.000100" {
		t.Fatalf("threaded mention = %+v %v", m, ok)
	}
	if m, ok = parse(f.DirectMessage("Ev3", "U1", "D1", "dm")).Message(""); !ok || m.Kind != "im" {
		t.Fatalf("dm = %+v %v", m, ok)
	}
	// The bot's own messages are never taken, whatever the allow list.
	if _, ok = parse(f.BotMessage("Ev4", "D1", "my reply")).Message("", "B0BOT"); ok {
		t.Fatal("own bot message taken")
	}
	other := parse(f.DirectMessage("Ev5", "U9", "D1", "from another bot"))
	other.Event.BotID = "B0OTHER"
	if _, ok = other.Message(""); ok {
		t.Fatal("other bot's message taken without allow")
	}
	if _, ok = other.Message("", "B0OTHER"); !ok {
		t.Fatal("allowed bot's message refused")
	}
	edit := parse(f.DirectMessage("Ev6", "U1", "D1", "x"))
	edit.Event.Subtype = "message_changed"
	if _, ok = edit.Message(""); ok {
		t.Fatal("edit taken")
	}
	chanMsg := parse(f.DirectMessage("Ev7", "U1", "C1", "x"))
	chanMsg.Event.ChannelType = "channel"
	if _, ok = chanMsg.Message(""); ok {
		t.Fatal("plain channel message taken")
	}
	for _, bad := range []string{`{}`, `not json`, `{"type":"url_verification"}`, `{"type":"event_callback","event_id":"E"}`} {
		if _, err := slack.Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%s) succeeded", bad)
		}
	}
}

func TestReplyInThread(t *testing.T) {
	f := slacktest.New(secret, "xoxb-good")
	defer f.Close()
	calls := 0
	c := &slack.Client{BaseURL: f.APIURL(), Token: func(context.Context) (string, error) { calls++; return "xoxb-good", nil }}
	ts, err := c.PostMessage(t.Context(), slack.PostMessage{Channel: "C1", Text: "done: 3 files changed", ThreadTS: "1700000000.000100"})
	if err != nil || ts == "" {
		t.Fatalf("PostMessage = %q, %v", ts, err)
	}
	posts, err := f.WaitPosts(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if p := posts[0]; p.Channel != "C1" || p.Text != "done: 3 files changed" || p.ThreadTS != "1700000000.000100" ||
		p.Token != "xoxb-good" || p.TS != ts {
		t.Fatalf("post = %+v", p)
	}
	if calls != 1 {
		t.Fatalf("token read %d times", calls)
	}
	// Slack's own errors and the token source's come back as errors.
	bad := &slack.Client{BaseURL: f.APIURL(), Token: func(context.Context) (string, error) { return "xoxb-bad", nil }}
	var apiErr *slack.APIError
	if _, err := bad.PostMessage(t.Context(), slack.PostMessage{Channel: "C1", Text: "x"}); !errors.As(err, &apiErr) || apiErr.Code != "invalid_auth" {
		t.Fatalf("bad token: %v", err)
	}
	noTok := &slack.Client{BaseURL: f.APIURL(), Token: func(context.Context) (string, error) { return "", errors.New("secret gone") }}
	if _, err := noTok.PostMessage(t.Context(), slack.PostMessage{Channel: "C1", Text: "x"}); err == nil || !strings.Contains(err.Error(), "secret gone") {
		t.Fatalf("token error: %v", err)
	}
	if len(f.Posts()) != 1 {
		t.Fatalf("posts = %+v", f.Posts())
	}
	rl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer rl.Close()
	c.BaseURL = rl.URL
	if _, err := c.PostMessage(t.Context(), slack.PostMessage{Channel: "C1", Text: "x"}); !errors.As(err, &apiErr) || apiErr.RetryAfter != 7*time.Second {
		t.Fatalf("rate limited: %v", err)
	}
}
