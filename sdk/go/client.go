package warden

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

const (
	// DefaultURL is the daemon's default TCP address.
	DefaultURL = "http://127.0.0.1:7070"
	// DefaultSocketURL addresses the daemon's default unix socket.
	DefaultSocketURL = "unix:///run/warden/wardend.sock"

	// EnvURL names the environment variable that sets the base URL.
	EnvURL = "WARDEN_URL"
	// EnvAPIKey names the environment variable that sets the API key.
	EnvAPIKey = "WARDEN_API_KEY"

	// DefaultMaxEventSize bounds one line of an NDJSON stream.
	DefaultMaxEventSize = 4 << 20

	defaultUserAgent = "warden-go"
	// unixHost is the Host used for requests sent over a unix socket.
	unixHost = "wardend"
	// maxErrorBody bounds how much of an error response is read.
	maxErrorBody = 64 << 10
)

// Client talks to one Warden daemon. It is safe for concurrent use.
type Client struct {
	base      string // scheme://host[/prefix], no trailing slash
	socket    string // unix socket path, or ""
	apiKey    string
	hc        *http.Client
	userAgent string
	retry     RetryPolicy
	maxEvent  int
}

type config struct {
	baseURL   *string
	apiKey    *string
	hc        *http.Client
	userAgent string
	retry     *RetryPolicy
	maxEvent  int
}

// Option configures a [Client].
type Option func(*config)

// WithBaseURL sets the daemon's address: http://host:port, https://host:port (an optional
// path prefix is kept), or unix:///path/to/socket for HTTP over a unix socket. Without it
// the client uses $WARDEN_URL, then [DefaultURL].
func WithBaseURL(u string) Option { return func(c *config) { c.baseURL = &u } }

// WithAPIKey sets the API key sent as a bearer token. Without it the client uses
// $WARDEN_API_KEY. An empty key sends no Authorization header.
func WithAPIKey(key string) Option { return func(c *config) { c.apiKey = &key } }

// WithHTTPClient sets the HTTP client. Its Timeout should be zero: streams and large
// transfers run as long as their context allows. For a unix:// base URL a client whose
// Transport is nil or an *http.Transport is copied and given a dialer for the socket;
// any other Transport must reach the socket itself.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.hc = hc } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *config) { c.userAgent = ua } }

// WithRetry sets the retry policy; RetryPolicy{MaxAttempts: 1} disables retries.
func WithRetry(p RetryPolicy) Option { return func(c *config) { c.retry = &p } }

// WithMaxEventSize bounds the size of one NDJSON stream line; longer lines fail the stream.
// The default is [DefaultMaxEventSize].
func WithMaxEventSize(n int) Option { return func(c *config) { c.maxEvent = n } }

// New returns a client configured by opts and the environment (see [EnvURL], [EnvAPIKey]).
func New(opts ...Option) (*Client, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	raw := DefaultURL
	if cfg.baseURL != nil {
		raw = *cfg.baseURL
	} else if v := os.Getenv(EnvURL); v != "" {
		raw = v
	}
	c := &Client{
		userAgent: defaultUserAgent,
		retry:     DefaultRetryPolicy,
		maxEvent:  DefaultMaxEventSize,
	}
	if cfg.apiKey != nil {
		c.apiKey = *cfg.apiKey
	} else {
		c.apiKey = os.Getenv(EnvAPIKey)
	}
	if cfg.userAgent != "" {
		c.userAgent = cfg.userAgent
	}
	if cfg.retry != nil {
		c.retry = cfg.retry.withDefaults()
	}
	if cfg.maxEvent > 0 {
		c.maxEvent = cfg.maxEvent
	}

	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse base url: %w", err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return nil, fmt.Errorf("base url %q: no host", raw)
		}
		c.base = u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/")
	case "unix":
		c.socket = u.Path
		if c.socket == "" {
			c.socket = u.Opaque
		}
		if c.socket == "" {
			return nil, fmt.Errorf("base url %q: no socket path", raw)
		}
		c.base = "http://" + unixHost
	default:
		return nil, fmt.Errorf("base url %q: scheme must be http, https or unix", raw)
	}

	c.hc = cfg.hc
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	if c.socket != "" {
		c.hc = unixClient(c.hc, c.socket)
	}
	return c, nil
}

// unixClient returns a copy of hc whose transport dials the unix socket at path.
func unixClient(hc *http.Client, path string) *http.Client {
	var tr *http.Transport
	switch t := hc.Transport.(type) {
	case nil:
		tr = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		tr = t.Clone()
	default:
		return hc
	}
	tr.Proxy = nil // a proxy cannot reach a local socket
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", path)
	}
	cp := *hc
	cp.Transport = tr
	return &cp
}

// BaseURL returns the URL requests are sent to; for a unix socket, http://wardend.
func (c *Client) BaseURL() string { return c.base }

// request describes one API call.
type request struct {
	method string
	path   string // escaped path, starting with /
	query  url.Values
	header http.Header

	json        any       // marshalled as the JSON body when non-nil
	body        io.Reader // raw body when json is nil
	contentType string    // of body

	// idempotent marks calls that may be repeated after a 429 or 503.
	idempotent bool
	// accept is the Accept header; application/json when empty.
	accept string
}

// bodySource produces the request body for each attempt.
type bodySource struct {
	data     []byte    // whole body in memory
	r        io.Reader // single-use or seekable reader
	seeker   io.Seeker
	start    int64
	used     bool
	hasBody  bool
	inMemory bool
}

func newBodySource(rq *request) (*bodySource, error) {
	switch {
	case rq.json != nil:
		b, err := json.Marshal(rq.json)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		return &bodySource{data: b, hasBody: true, inMemory: true}, nil
	case rq.body == nil:
		return &bodySource{inMemory: true}, nil
	}
	switch r := rq.body.(type) {
	case *bytes.Buffer:
		return &bodySource{data: r.Bytes(), hasBody: true, inMemory: true}, nil
	}
	bs := &bodySource{r: rq.body, hasBody: true}
	if s, ok := rq.body.(io.Seeker); ok {
		if off, err := s.Seek(0, io.SeekCurrent); err == nil {
			bs.seeker, bs.start = s, off
		}
	}
	return bs, nil
}

// next returns the body for one attempt and its length (-1 if unknown).
func (b *bodySource) next() (io.Reader, int64, error) {
	switch {
	case !b.hasBody:
		return nil, 0, nil
	case b.inMemory:
		return bytes.NewReader(b.data), int64(len(b.data)), nil
	case b.used && b.seeker == nil:
		return nil, 0, errors.New("request body cannot be replayed")
	case b.used:
		if _, err := b.seeker.Seek(b.start, io.SeekStart); err != nil {
			return nil, 0, fmt.Errorf("rewind request body: %w", err)
		}
	}
	b.used = true
	n := int64(-1)
	switch r := b.r.(type) {
	case *bytes.Reader:
		n = int64(r.Len())
	case *strings.Reader:
		n = int64(r.Len())
	}
	// Hide Close so that the transport does not close the caller's reader.
	return struct{ io.Reader }{b.r}, n, nil
}

// canRetry reports whether another attempt may be made with this body.
func (b *bodySource) canRetry() bool { return b.inMemory || b.seeker != nil }

func (c *Client) newHTTPRequest(ctx context.Context, rq *request, body io.Reader, n int64) (*http.Request, error) {
	u := c.base + rq.path
	if len(rq.query) > 0 {
		u += "?" + rq.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, rq.method, u, nil)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Body = io.NopCloser(body)
		req.ContentLength = n
		if n == 0 {
			req.Body = http.NoBody
		}
	}
	for k, v := range rq.header {
		req.Header[k] = v
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	req.Header.Set("User-Agent", c.userAgent)
	accept := rq.accept
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept)
	switch {
	case rq.json != nil:
		req.Header.Set("Content-Type", "application/json")
	case rq.body != nil && rq.contentType != "":
		req.Header.Set("Content-Type", rq.contentType)
	}
	return req, nil
}

// send performs rq, retrying as the policy allows, and returns a response with a status
// below 400. Error statuses are returned as *Error. The caller closes the response body.
func (c *Client) send(ctx context.Context, rq *request) (*http.Response, error) {
	body, err := newBodySource(rq)
	if err != nil {
		return nil, err
	}
	// first is the failure that caused the first retry: when a retry fails
	// too, the caller gets it, not what the retry ran into (a sandbox that
	// died under an upload answers the retry "stopping", which hides why).
	var first *Error
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r, n, err := body.next()
		if err != nil {
			if first != nil {
				return nil, first
			}
			return nil, err
		}
		req, err := c.newHTTPRequest(ctx, rq, r, n)
		if err != nil {
			return nil, err
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if attempt < c.retry.MaxAttempts && body.canRetry() && isRefused(err) {
				if werr := sleep(ctx, c.retry.backoff(attempt)); werr != nil {
					return nil, werr
				}
				continue
			}
			if first != nil {
				return nil, first
			}
			return nil, err
		}
		if resp.StatusCode < 400 {
			return resp, nil
		}
		apiErr := decodeError(resp)
		if !rq.idempotent || !body.canRetry() || attempt >= c.retry.MaxAttempts || !retryableStatus(resp.StatusCode) {
			if first != nil && !retryableStatus(resp.StatusCode) {
				return nil, first
			}
			return nil, apiErr
		}
		if first == nil {
			first = apiErr
		}
		delay, ok := c.retry.delay(attempt, resp.Header.Get("Retry-After"), time.Now())
		if !ok {
			return nil, apiErr
		}
		if dl, has := ctx.Deadline(); has && time.Until(dl) < delay {
			return nil, apiErr // the deadline would pass while waiting
		}
		if werr := sleep(ctx, delay); werr != nil {
			return nil, werr
		}
	}
}

// do performs rq and decodes a JSON response into out (unless out is nil).
func (c *Client) do(ctx context.Context, rq *request, out any) error {
	resp, err := c.send(ctx, rq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode response: %w", err)
	}
	return nil
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pathf builds an escaped path from a format whose %s verbs take path segments.
func pathf(format string, segs ...any) string {
	esc := make([]any, len(segs))
	for i, s := range segs {
		switch v := s.(type) {
		case string:
			esc[i] = url.PathEscape(v)
		default:
			esc[i] = v
		}
	}
	return fmt.Sprintf(format, esc...)
}
