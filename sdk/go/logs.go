package warden

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Streams of a [LogEvent].
const (
	LogStdout  = "stdout"
	LogStderr  = "stderr"
	LogPTY     = "pty"
	LogDropped = "dropped" // older output the agent's buffer no longer holds
	LogEnd     = "end"     // the process has exited
	LogError   = "error"   // the stream failed
)

// LogEvent is one event of [Client.Logs].
type LogEvent struct {
	PID    int    `json:"pid"`
	Stream string `json:"stream"`
	// Data is the output (stdout, stderr and pty events), already base64-decoded.
	Data []byte `json:"data,omitempty"`
	// Dropped is how many bytes of older output were lost (dropped events).
	Dropped int64 `json:"dropped,omitempty"`
	// Status is the exit status (end events).
	Status string `json:"status,omitempty"`
	// Time is when the daemon relayed the event.
	Time time.Time `json:"time"`
	// Code and Message are set on error events.
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// LogsOptions selects what [Client.Logs] returns.
type LogsOptions struct {
	// PID selects one process; 0 means every process the sandbox's agent keeps (the
	// template's start command and processes started through the API).
	PID int
	// Follow keeps streaming live output until the processes exit.
	Follow bool
}

// Logs streams the output the sandbox keeps of its processes (the last 1 MiB of each):
// what is buffered, then, with opts.Follow, live output. Close the stream when done.
func (c *Client) Logs(ctx context.Context, id string, opts LogsOptions) (*LogStream, error) {
	q := url.Values{}
	if opts.PID != 0 {
		q.Set("pid", strconv.Itoa(opts.PID))
	}
	if opts.Follow {
		q.Set("follow", "true")
	}
	resp, err := c.send(ctx, &request{
		method:     http.MethodGet,
		path:       pathf("/v1/sandboxes/%s/logs", id),
		query:      q,
		accept:     "application/x-ndjson",
		idempotent: true,
	})
	if err != nil {
		return nil, fmt.Errorf("logs of sandbox %s: %w", id, err)
	}
	return &LogStream{ctx: ctx, dec: newLineDecoder(resp.Body, c.maxEvent)}, nil
}

// LogStream reads the events of [Client.Logs]. Its methods must not be called
// concurrently, except Close.
type LogStream struct {
	ctx       context.Context
	dec       *lineDecoder
	err       error
	closeOnce sync.Once
}

// Next returns the next event, io.EOF at the end of the stream, or an *Error for an error
// event.
func (s *LogStream) Next() (LogEvent, error) {
	if s.err != nil {
		return LogEvent{}, s.err
	}
	var ev LogEvent
	if err := s.dec.next(&ev); err != nil {
		if s.ctx.Err() != nil && err != io.EOF {
			err = s.ctx.Err()
		}
		s.err = err
		return LogEvent{}, err
	}
	if ev.Stream == LogError {
		s.err = &Error{Code: ev.Code, Message: ev.Message}
		s.dec.close()
		return LogEvent{}, s.err
	}
	return ev, nil
}

// Close stops reading the stream.
func (s *LogStream) Close() error {
	s.closeOnce.Do(func() { s.dec.close() })
	return nil
}
