package inject

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"time"
)

// Endpoint is an optional detector that asks an external classifier (for
// teams that run a larger model, such as Llama Prompt Guard 2) over HTTP.
//
// Contract: for each text (or each chunk of at most MaxBytes of a longer
// one) Warden sends
//
//	POST <url>
//	Content-Type: application/json
//	{"text": "...", "context": "tool_result"}
//
// where context is optional and says where the text comes from
// (prompt, tool_args, tool_result, fetched, ...). The endpoint answers 200 with
//
//	{"label": "injection" | "jailbreak" | "benign", "score": 0.97}
//
// where score is the probability, in [0,1], that the text is an attack
// (injection or jailbreak), whatever the label. A text is flagged when score
// is at or above the threshold; the finding's kind is the label, or
// injection when the label is benign. Any other status, a malformed or
// oversized answer, or a timeout is an error: the caller's policy decides
// whether that fails open or closed. The text never appears in an error.
type Endpoint struct {
	url       string
	client    *http.Client
	header    http.Header
	threshold float64
	maxBytes  int
	maxChunks int
	context   string
}

// EndpointOptions configure an Endpoint.
type EndpointOptions struct {
	// URL of the classifier (http or https).
	URL string
	// Client sends the requests; nil: a client with Timeout. Pass an
	// SSRF-checked client (internal/network/safedial) where the URL is not
	// set by an administrator.
	Client *http.Client
	// Timeout per request when Client is nil; 0: 2 s.
	Timeout time.Duration
	// Header is added to every request (for example Authorization).
	Header http.Header
	// Threshold on the score; 0: 0.5.
	Threshold float64
	// MaxBytes is the largest text sent in one request; longer texts are
	// sent in chunks. 0: 64 KiB.
	MaxBytes int
	// MaxChunks bounds the requests for one text; a longer text is an
	// error. 0: 64.
	MaxChunks int
	// Context is sent as "context" when not empty.
	Context string
}

// ErrEndpoint is wrapped by every error from the endpoint detector.
var ErrEndpoint = errors.New("injection endpoint")

// maxAnswer bounds the endpoint's answer.
const maxAnswer = 64 << 10

// NewEndpoint checks the options and returns the detector.
func NewEndpoint(o EndpointOptions) (*Endpoint, error) {
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: bad url: %w", ErrEndpoint, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: url must be http(s)://host/...", ErrEndpoint)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: url must not hold credentials; use a header", ErrEndpoint)
	}
	if o.Threshold < 0 || o.Threshold > 1 || math.IsNaN(o.Threshold) {
		return nil, fmt.Errorf("%w: threshold %v out of [0,1]", ErrEndpoint, o.Threshold)
	}
	if o.MaxBytes < 0 || o.MaxChunks < 0 || o.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative limit", ErrEndpoint)
	}
	e := &Endpoint{
		url: u.String(), client: o.Client, header: o.Header.Clone(), threshold: o.Threshold,
		maxBytes: o.MaxBytes, maxChunks: o.MaxChunks, context: o.Context,
	}
	if e.client == nil {
		t := o.Timeout
		if t == 0 {
			t = 2 * time.Second
		}
		e.client = &http.Client{Timeout: t}
	}
	if e.threshold == 0 {
		e.threshold = 0.5
	}
	if e.maxBytes == 0 {
		e.maxBytes = 64 << 10
	}
	if e.maxChunks == 0 {
		e.maxChunks = 64
	}
	return e, nil
}

type endpointRequest struct {
	Text    string `json:"text"`
	Context string `json:"context,omitempty"`
}

type endpointAnswer struct {
	Label *string  `json:"label"`
	Score *float64 `json:"score"`
}

// Inspect sends text (in chunks when long) and returns a finding for each
// chunk the endpoint scores at or above the threshold. An empty text is
// not sent.
func (e *Endpoint) Inspect(ctx context.Context, text string) ([]Finding, error) {
	if len(text) > e.maxBytes*e.maxChunks {
		return nil, fmt.Errorf("%w: text of %d bytes is over the %d-byte limit", ErrEndpoint, len(text), e.maxBytes*e.maxChunks)
	}
	var out []Finding
	for start := 0; start < len(text); {
		end := min(len(text), start+e.maxBytes)
		if end < len(text) {
			end = runeStart(text, end)
			if end <= start { // a single rune longer than maxBytes cannot happen for maxBytes >= 4
				end = min(len(text), start+e.maxBytes)
			}
		}
		label, score, err := e.ask(ctx, text[start:end])
		if err != nil {
			return nil, err
		}
		if score >= e.threshold {
			kind := label
			if kind == LabelBenign {
				kind = LabelInjection
			}
			out = append(out, Finding{Detector: DetectorEndpoint, Kind: kind, Start: start, End: end, Confidence: score})
		}
		if end >= len(text) {
			break
		}
		start = end
	}
	return out, nil
}

func (e *Endpoint) ask(ctx context.Context, text string) (string, float64, error) {
	body, err := json.Marshal(endpointRequest{Text: text, Context: e.context})
	if err != nil {
		return "", 0, fmt.Errorf("%w: %w", ErrEndpoint, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return "", 0, fmt.Errorf("%w: %w", ErrEndpoint, err)
	}
	for k, vs := range e.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is configuration, not news
		}
		return "", 0, fmt.Errorf("%w: request failed: %w", ErrEndpoint, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return "", 0, fmt.Errorf("%w: read answer: %w", ErrEndpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("%w: status %d", ErrEndpoint, resp.StatusCode)
	}
	if len(data) > maxAnswer {
		return "", 0, fmt.Errorf("%w: answer over %d bytes", ErrEndpoint, maxAnswer)
	}
	var a endpointAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		return "", 0, fmt.Errorf("%w: malformed answer: %w", ErrEndpoint, err)
	}
	if a.Label == nil || a.Score == nil {
		return "", 0, fmt.Errorf("%w: answer lacks label or score", ErrEndpoint)
	}
	if classIndex(*a.Label) < 0 {
		return "", 0, fmt.Errorf("%w: unknown label %.40q", ErrEndpoint, *a.Label)
	}
	if s := *a.Score; s < 0 || s > 1 || math.IsNaN(s) {
		return "", 0, fmt.Errorf("%w: score %v out of [0,1]", ErrEndpoint, s)
	}
	return *a.Label, *a.Score, nil
}

// runeStart moves i back to the start of a UTF-8 sequence.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && s[i]&0xC0 == 0x80 {
		i--
	}
	return i
}
