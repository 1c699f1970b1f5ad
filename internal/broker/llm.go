package broker

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/warden-sandbox/warden/internal/llmusage"
)

// LLMMeter meters the model calls a sandbox sends straight to a known LLM
// provider over a brokered connection, the way the LLM gateway meters its
// own (docs/llm.md): the daemon's is the gateway's egress meter. The
// broker parses the request's model and the response's usage fields from
// bounded copies of what it relays; the relayed bytes are not delayed or
// changed, except that a metered request asks for an uncompressed
// response (Accept-Encoding: identity), as a brokered one does already.
type LLMMeter interface {
	// Known reports whether the TLS server name is a known provider's:
	// its model calls (POST to a model API path, llmusage.API) are
	// metered.
	Known(host string) bool
	// Begin is called for a metered request before any of it goes
	// upstream. A refusal (a budget that is spent) is answered to the
	// sandbox and nothing of the request is sent; otherwise the call's End
	// is told the outcome.
	Begin(ctx context.Context, r LLMRequest) (LLMCall, *LLMRefusal)
}

// LLMRequest is a metered request.
type LLMRequest struct {
	SandboxID   string
	PrincipalID string
	Host        string // the TLS server name
	Method      string
	Path        string // without the query
	API         string // llmusage.API of the path
	// ContentLength is the request body's declared length, -1 when it
	// is chunked or absent.
	ContentLength int64
}

// LLMCall is a metered request in flight.
type LLMCall interface {
	// End is told how the call ended, once its response was relayed (or
	// failed). It is called once, on the connection's goroutine.
	End(r LLMResult)
}

// LLMResult is what the broker saw of a metered call.
type LLMResult struct {
	// Status is the upstream's final status code, 0 when none came.
	Status int
	Stream bool // the response was an event stream
	Usage  llmusage.Usage
	// Model is the request's model, or else the one the response named.
	Model string
	// Unmetered says why no usage was read ("" when it was).
	Unmetered string
	// Err is why the exchange failed, nil when it completed.
	Err error
}

// LLMRefusal is the broker's answer to a metered request it must not
// forward: a status (429 for a spent budget) and a JSON body in the
// provider's error shape.
type LLMRefusal struct {
	Status int
	Body   []byte
}

// maxLLMRequestPrefix is how much of a metered request body is kept to
// read its model from (the field is near the start of what SDKs send).
const maxLLMRequestPrefix = 64 << 10

// prefixTap keeps the start of what is written to it; safe for the body
// copy's goroutine to write while the response is relayed.
type prefixTap struct {
	mu  sync.Mutex
	buf []byte
}

func (p *prefixTap) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := maxLLMRequestPrefix - len(p.buf); n > 0 {
		p.buf = append(p.buf, b[:min(n, len(b))]...)
	}
	return len(b), nil
}

func (p *prefixTap) model() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return llmusage.RequestModel(p.buf)
}

// llmExchange is the metering of one request on a connection.
type llmExchange struct {
	call   LLMCall
	req    *prefixTap
	resp   *llmusage.Tap // set with the final response's head
	status int
}

// beginLLM starts metering req when it is a model call to a known
// provider. A refusal has been answered (the connection is to close).
func (c *conn) beginLLM(req *request) (*llmExchange, bool) {
	m := c.b.cfg.LLM
	if m == nil || req.method != http.MethodPost || !strings.HasPrefix(req.target, "/") || !m.Known(c.sni) {
		return nil, true
	}
	api := llmusage.API(req.target)
	if api == "" {
		return nil, true
	}
	cl := req.contentLength
	if req.chunked {
		cl = -1
	}
	call, refusal := m.Begin(c.ctx, LLMRequest{SandboxID: c.sandboxID, PrincipalID: c.principalID, Host: c.sni,
		Method: req.method, Path: requestPath(req.target), API: api, ContentLength: cl})
	if refusal != nil {
		c.writeRefusal(refusal)
		return nil, false
	}
	if call == nil {
		return nil, true
	}
	// The usage fields are read from a copy of the response: ask for it
	// uncompressed (a gzip whole body is still decoded; see llmusage.Tap).
	req.head.drop("Accept-Encoding")
	req.head.add("Accept-Encoding", "identity")
	return &llmExchange{call: call, req: &prefixTap{}}, true
}

// writeRefusal answers a metered request the meter refused.
func (c *conn) writeRefusal(r *LLMRefusal) {
	status := r.Status
	if status < 400 || status > 599 {
		status = http.StatusTooManyRequests
	}
	// x-should-retry: false keeps the providers' SDKs from retrying a
	// spent budget.
	fmt.Fprintf(c.cw, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nX-Should-Retry: false\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		status, http.StatusText(status), len(r.Body))
	c.cw.Write(r.Body)
	c.cw.Flush()
}

// response notes the final response's head: its status and how its body
// is to be read.
func (x *llmExchange) response(resp *response) {
	if x == nil {
		return
	}
	x.status = resp.code
	ct, ce := "", ""
	if v := resp.head.values("Content-Type"); len(v) > 0 {
		ct = v[0]
	}
	if v := resp.head.values("Content-Encoding"); len(v) > 0 {
		ce = strings.Join(v, ",")
	}
	x.resp = llmusage.NewTap(ct, ce)
}

// end tells the meter how the call ended. reqDone says whether the
// request body's copy has finished (its prefix may be read).
func (x *llmExchange) end(reqDone bool, err error) {
	if x == nil {
		return
	}
	r := LLMResult{Status: x.status, Err: err}
	if reqDone {
		r.Model = x.req.model()
	}
	if x.resp != nil {
		var model string
		r.Usage, model, r.Unmetered = x.resp.Result()
		r.Stream = x.resp.Stream()
		if r.Model == "" {
			r.Model = model
		}
	} else {
		r.Unmetered = "no response"
	}
	x.call.End(r)
}
