package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/warden-sandbox/warden/internal/agents/slack"
	"github.com/warden-sandbox/warden/internal/store"
)

// SlackInput is the input of a run a Slack message started.
type SlackInput struct {
	Kind     string `json:"kind"` // app_mention or im
	Text     string `json:"text"`
	User     string `json:"user"`
	Channel  string `json:"channel"`
	TS       string `json:"ts"`
	ThreadTS string `json:"thread_ts"`
	EventID  string `json:"event_id"`
	TeamID   string `json:"team_id,omitempty"`
}

// ErrNoSlack means the agent has no Slack trigger (or the daemon no
// secrets store).
var ErrNoSlack = errors.New("the agent has no slack trigger")

func (s *Service) slackDeduper() *slack.Deduper {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dedupe == nil {
		s.dedupe = slack.NewDeduper(0, 0, s.now)
	}
	return s.dedupe
}

// SlackEvents serves the Events API request URL of agent a: it verifies
// the request with the app's signing secret (a secret of the agent's
// owner), answers url_verification, and queues a run for each new mention
// of the bot or direct message to it (deduplicated by event_id; Slack's
// retries and replays start nothing). It answers at once: the run is
// asynchronous.
func (s *Service) SlackEvents(w http.ResponseWriter, r *http.Request, a store.Agent) error {
	spec, err := ParseSpec(a.Spec)
	if err != nil || spec.Triggers.Slack == nil || s.cfg.Secret == nil {
		return ErrNoSlack
	}
	sl := spec.Triggers.Slack
	signing, err := s.cfg.Secret(r.Context(), a.OwnerID, sl.SigningSecret)
	if err != nil {
		return fmt.Errorf("slack signing secret %q: %w", sl.SigningSecret, err)
	}
	h := &slack.Handler{
		Verifier: &slack.Verifier{Secret: signing, Now: s.now},
		Dedupe:   s.slackDeduper(),
		OnMessage: func(r *http.Request, m slack.Message) {
			if len(sl.Channels) > 0 && !slices.Contains(sl.Channels, m.Channel) && m.Kind != "im" {
				return
			}
			in, _ := json.Marshal(SlackInput{Kind: m.Kind, Text: m.Text, User: m.User, Channel: m.Channel, TS: m.TS,
				ThreadTS: m.ThreadTS, EventID: m.EventID, TeamID: m.TeamID})
			if _, err := s.Trigger(context.WithoutCancel(r.Context()), a, TriggerSlack, "slack:"+m.User, in); err != nil {
				s.log.Warn("agents: slack: queue a run", "agent", a.Name, "event", m.EventID, "err", err)
			}
		},
	}
	h.ServeHTTP(w, r)
	return nil
}

// SlackReply posts text in the Slack thread that started run r (a live
// run of agent a) with the app's bot token, which stays in wardend.
func (s *Service) SlackReply(ctx context.Context, a store.Agent, r store.AgentRun, text string) (string, error) {
	if r.Trigger != TriggerSlack {
		return "", invalid("run %s was not started by slack", r.ID)
	}
	if r.State != store.RunRunning {
		return "", invalid("run %s is %s: only a running run replies", r.ID, r.State)
	}
	if text == "" || len(text) > 40000 {
		return "", invalid("text: 1 to 40000 bytes")
	}
	spec, err := s.specOf(ctx, a, r.Version)
	if err != nil {
		return "", err
	}
	if spec.Triggers.Slack == nil || s.cfg.Secret == nil {
		return "", ErrNoSlack
	}
	var in SlackInput
	if err := json.Unmarshal(r.Input, &in); err != nil || in.Channel == "" {
		return "", invalid("run %s has no slack thread in its input", r.ID)
	}
	sl := spec.Triggers.Slack
	c := &slack.Client{BaseURL: sl.APIURL, Token: func(ctx context.Context) (string, error) {
		b, err := s.cfg.Secret(ctx, a.OwnerID, sl.BotToken)
		return string(b), err
	}}
	ts, err := c.PostMessage(ctx, slack.PostMessage{Channel: in.Channel, Text: text, ThreadTS: in.ThreadTS})
	if err != nil {
		return "", fmt.Errorf("slack reply: %w", err)
	}
	s.mu.Lock()
	if ar := s.active[r.ID]; ar != nil {
		ar.replied.Store(true)
	}
	s.mu.Unlock()
	s.audit(ctx, a.PrincipalID, "agent.slack_reply", a.Name, map[string]any{"run": r.ID, "channel": in.Channel, "thread_ts": in.ThreadTS})
	return ts, nil
}

// maxReplyOutput bounds the output posted as a run's final Slack reply.
const maxReplyOutput = 3000

// tailBuffer keeps the last maxReplyOutput bytes written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > maxReplyOutput {
		t.b = append([]byte(nil), t.b[len(t.b)-maxReplyOutput:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// slackFinalReply answers a Slack-started run that did not reply itself:
// with its output when it succeeded, else with how it ended.
func (s *Service) slackFinalReply(ctx context.Context, a store.Agent, spec Spec, r store.AgentRun, state, reason, out string) {
	if spec.Triggers.Slack == nil || spec.Triggers.Slack.NoFinalReply {
		return
	}
	text := strings.TrimSpace(out)
	switch {
	case state != store.RunSucceeded:
		text = fmt.Sprintf("Sorry, run %s %s: %s", r.ID, strings.ReplaceAll(state, "_", " "), reason)
	case text == "":
		text = "(done, no output)"
	}
	live := r
	live.State = store.RunRunning // SlackReply answers live runs only
	if _, err := s.SlackReply(ctx, a, live, text); err != nil {
		s.log.Warn("agents: slack: final reply", "agent", a.Name, "run", r.ID, "err", err)
	}
}
