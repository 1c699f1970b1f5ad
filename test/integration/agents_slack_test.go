package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/agents/slack/slacktest"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// testAgentSlack: a fake Slack (Events API sender with real signatures and
// a Web API receiver). A mention starts a run that runs a command in its
// sandbox and answers in the mention's thread with the bot token that
// stays in wardend; a retry of the same event, a forged, a stale and a
// bot's own message start nothing.
func testAgentSlack(t *testing.T, d *daemon, c *warden.Client) {
	ctx := ctxT(t)
	fake := slacktest.New("slack-signing-secret-1", "xoxb-test-token")
	defer fake.Close()
	if _, err := c.PutSecret(ctx, "slack-signing", "slack-signing-secret-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutSecret(ctx, "slack-bot", "xoxb-test-token"); err != nil {
		t.Fatal(err)
	}
	createAgent(t, c, map[string]any{"name": "slacker",
		"command": []string{"/bin/sh", "-c", `echo "kernel=$(uname -s) token=${SLACK_BOT_TOKEN:-none}"; ` +
			`grep -o '"text":"[^"]*"' "$WARDEN_RUN_INPUT_FILE"; env | grep -c xoxb || true`},
		"triggers": map[string]any{"slack": map[string]any{"signing_secret": "slack-signing", "bot_token": "slack-bot",
			"api_url": fake.APIURL()}}})
	url := d.url + "/v1/agents/slacker/slack/events"

	code, body, err := fake.Send(ctx, url, slacktest.Request{Body: fake.URLVerification("challenge-42")})
	if err != nil || code != http.StatusOK || !strings.Contains(string(body), "challenge-42") {
		t.Fatalf("url_verification: %d %s %v", code, body, err)
	}
	mention := fake.Mention("Ev001", "U0ALICE", "C0GENERAL", "which kernel?", "")
	if code, body, err := fake.Send(ctx, url, slacktest.Request{Body: mention}); err != nil || code != http.StatusOK {
		t.Fatalf("mention: %d %s %v", code, body, err)
	}
	wctx, cancel := contextWithTimeout(t, 90*time.Second)
	defer cancel()
	posts, err := fake.WaitPosts(wctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Event struct{ TS string } `json:"event"`
	}
	json.Unmarshal(mention, &ev)
	p := posts[0]
	if p.Channel != "C0GENERAL" || p.ThreadTS != ev.Event.TS || p.Token != "xoxb-test-token" {
		t.Errorf("reply: %+v, want channel C0GENERAL in thread %s with the bot token", p, ev.Event.TS)
	}
	if !strings.Contains(p.Text, "kernel=Linux token=none") || !strings.Contains(p.Text, "which kernel?") || !strings.HasSuffix(p.Text, "0") {
		t.Errorf("reply text %q: want the command's output, the question, and no bot token in the sandbox", p.Text)
	}
	runs, err := c.AgentRuns(ctx, "slacker", "", 0)
	if err != nil || len(runs) != 1 || runs[0].Trigger != "slack" {
		t.Fatalf("slack runs: %+v %v", runs, err)
	}
	waitRun(t, c, runs[0].ID, "succeeded", func(r warden.AgentRun) bool { return r.State == warden.AgentRunSucceeded })

	// Slack's retry of the same event, a forgery, a stale request and the
	// bot's own message start nothing.
	if code, _, _ := fake.Send(ctx, url, slacktest.Request{Body: mention, Retry: 1}); code != http.StatusOK {
		t.Errorf("retry: %d", code)
	}
	other := fake.Mention("Ev002", "U0MALLORY", "C0GENERAL", "rm -rf", "")
	if code, _, _ := fake.Send(ctx, url, slacktest.Request{Body: other, Secret: []byte("guessed")}); code != http.StatusUnauthorized {
		t.Errorf("forged: %d", code)
	}
	if code, _, _ := fake.Send(ctx, url, slacktest.Request{Body: other, At: time.Now().Add(-10 * time.Minute)}); code != http.StatusUnauthorized {
		t.Errorf("stale: %d", code)
	}
	if code, _, _ := fake.Send(ctx, url, slacktest.Request{Body: fake.BotMessage("Ev003", "D0BOT", "my own reply")}); code != http.StatusOK {
		t.Errorf("bot message: %d", code)
	}
	if code, _, _ := fake.Send(ctx, d.url+"/v1/agents/hello/slack/events", slacktest.Request{Body: other}); code != http.StatusNotFound {
		t.Errorf("an agent without a slack trigger: %d", code)
	}
	time.Sleep(1500 * time.Millisecond) // a dispatch tick
	if runs, _ := c.AgentRuns(ctx, "slacker", "", 0); len(runs) != 1 {
		t.Errorf("runs after retry, forgery, stale and bot messages: %d, want 1", len(runs))
	}
	if n := len(fake.Posts()); n != 1 {
		t.Errorf("posts: %d, want 1", n)
	}
	// A run that replies itself (here its owner, through the reply
	// endpoint, while it runs) gets no final reply.
	createAgent(t, c, map[string]any{"name": "slacker2", "command": []string{"/bin/sh", "-c", "sleep 2; echo final-output"},
		"triggers": map[string]any{"slack": map[string]any{"signing_secret": "slack-signing", "bot_token": "slack-bot",
			"api_url": fake.APIURL()}}})
	url2 := d.url + "/v1/agents/slacker2/slack/events"
	if code, body, err := fake.Send(ctx, url2, slacktest.Request{Body: fake.DirectMessage("Ev010", "U0ALICE", "D0ALICE", "hello")}); err != nil || code != http.StatusOK {
		t.Fatalf("direct message: %d %s %v", code, body, err)
	}
	var run warden.AgentRun
	deadline := time.Now().Add(60 * time.Second)
	for run.ID == "" {
		if runs, _ := c.AgentRuns(ctx, "slacker2", "running", 0); len(runs) == 1 {
			run = runs[0]
		} else if time.Now().After(deadline) {
			t.Fatal("the direct message started no run")
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, d.url+"/v1/agent-runs/"+run.ID+"/reply", strings.NewReader(`{"text":"on it"}`))
	req.Header.Set("Authorization", "Bearer "+d.adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reply: %d", resp.StatusCode)
	}
	waitRun(t, c, run.ID, "ended", warden.AgentRun.Ended)
	posts = fake.Posts()
	if len(posts) != 2 || posts[1].Text != "on it" || posts[1].Channel != "D0ALICE" {
		t.Errorf("posts after a run that replied itself: %+v", posts)
	}
}
