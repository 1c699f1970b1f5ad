package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// DefaultBaseURL is Slack's Web API.
const DefaultBaseURL = "https://slack.com/api"

// Client calls Slack's Web API as a bot.
type Client struct {
	// BaseURL is the Web API's base (default DefaultBaseURL); tests point
	// it at a fake.
	BaseURL string
	// Token returns the bot token (xoxb-...) for each call: from the
	// secrets store, so it is read where it is used and never kept here.
	Token func(ctx context.Context) (string, error)
	// HTTP is the client (default: one with a 30 s timeout).
	HTTP *http.Client
}

// PostMessage is chat.postMessage's request.
type PostMessage struct {
	Channel  string `json:"channel"`
	Text     string `json:"text"`
	ThreadTS string `json:"thread_ts,omitempty"`
}

// APIError is a Web API answer with ok false.
type APIError struct {
	Method string
	Code   string // Slack's error, e.g. channel_not_found
	// RetryAfter is set when Slack rate-limited the call (HTTP 429).
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("slack %s: %s (retry after %s)", e.Method, e.Code, e.RetryAfter)
	}
	return fmt.Sprintf("slack %s: %s", e.Method, e.Code)
}

// PostMessage posts a message (in a thread when ThreadTS is set) and
// returns its ts.
func (c *Client) PostMessage(ctx context.Context, m PostMessage) (string, error) {
	if m.Channel == "" || m.Text == "" {
		return "", errors.New("slack chat.postMessage: channel and text are required")
	}
	var out struct {
		TS string `json:"ts"`
	}
	if err := c.call(ctx, "chat.postMessage", m, &out); err != nil {
		return "", err
	}
	return out.TS, nil
}

func (c *Client) call(ctx context.Context, method string, in, out any) error {
	if c.Token == nil {
		return fmt.Errorf("slack %s: no bot token source", method)
	}
	tok, err := c.Token(ctx)
	if err != nil {
		return fmt.Errorf("slack %s: bot token: %w", method, err)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("slack %s: %w", method, err)
	}
	base := c.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, trimBase(base)+"/"+method, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("slack %s: %w", method, err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Authorization", "Bearer "+tok)
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("slack %s: %w", method, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return &APIError{Method: method, Code: "ratelimited", RetryAfter: time.Duration(secs) * time.Second}
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("slack %s: read answer: %w", method, err)
	}
	if resp.StatusCode != http.StatusOK {
		return &APIError{Method: method, Code: "http_" + strconv.Itoa(resp.StatusCode)}
	}
	var res struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("slack %s: decode answer: %w", method, err)
	}
	if !res.OK {
		return &APIError{Method: method, Code: res.Error}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("slack %s: decode answer: %w", method, err)
		}
	}
	return nil
}
