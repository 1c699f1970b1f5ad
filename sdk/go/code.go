package warden

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Code-interpreter languages for [RunCodeRequest.Language] and [Client.CreateCodeContext].
const (
	LangPython     = "python"
	LangJavaScript = "javascript"
	LangTypeScript = "typescript"
	LangBash       = "bash"
	LangR          = "r"
	LangJava       = "java"
)

// RunCodeRequest is a cell for [Client.RunCode]. Give Language or ContextID, not both;
// with neither the default Python context runs it.
type RunCodeRequest struct {
	Code           string            `json:"code"`
	Language       string            `json:"language,omitempty"`
	ContextID      string            `json:"context_id,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	// User runs the default context of that user; the sandbox's user when empty.
	User string `json:"user,omitempty"`
}

// CodeResult is a displayed value as a MIME bundle: only the representations the value has
// are set. PNG, JPEG and PDF are base64 as on the wire; see [CodeResult.PNGBytes].
type CodeResult struct {
	IsMainResult bool            `json:"is_main_result"`
	Text         string          `json:"text,omitempty"`
	HTML         string          `json:"html,omitempty"`
	Markdown     string          `json:"markdown,omitempty"`
	SVG          string          `json:"svg,omitempty"`
	PNG          string          `json:"png,omitempty"`
	JPEG         string          `json:"jpeg,omitempty"`
	PDF          string          `json:"pdf,omitempty"`
	LaTeX        string          `json:"latex,omitempty"`
	JSON         json.RawMessage `json:"json,omitempty"`
	JavaScript   string          `json:"javascript,omitempty"`
}

// PNGBytes decodes PNG (nil, nil when the result has none).
func (r CodeResult) PNGBytes() ([]byte, error) {
	if r.PNG == "" {
		return nil, nil
	}
	return base64.StdEncoding.DecodeString(r.PNG)
}

// CodeError is a cell's failure: an exception, a rejected promise, a non-zero bash status,
// a timeout ("TimeoutError") or an interrupt.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

func (e *CodeError) Error() string { return e.Name + ": " + e.Value }

// CodeLogs holds a run's output, one entry per chunk as written.
type CodeLogs struct {
	Stdout []string
	Stderr []string
}

// Execution is the outcome of [Client.RunCode].
type Execution struct {
	Results        []CodeResult
	Logs           CodeLogs
	Error          *CodeError // nil when the cell succeeded
	ExecutionCount int
}

// Text is the main result's text/plain, "" when there is none.
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.IsMainResult {
			return r.Text
		}
	}
	return ""
}

// CodeHandlers receive a run's events as they arrive; any may be nil.
type CodeHandlers struct {
	OnStdout func(text string)
	OnStderr func(text string)
	OnResult func(CodeResult)
	OnError  func(*CodeError)
}

// codeEvent is one line of a run's stream.
type codeEvent struct {
	Type           string `json:"type"`
	Text           string `json:"text"`
	Name           string `json:"name"`
	Value          string `json:"value"`
	Traceback      string `json:"traceback"`
	ExecutionCount int    `json:"execution_count"`
}

// RunCode runs a cell in an interpreter context of the sandbox and returns its execution
// once it ends, calling h's handlers as events arrive. A failing cell is not an error of
// the call: see [Execution.Error]. Cancelling ctx interrupts the cell.
func (c *Client) RunCode(ctx context.Context, id string, req RunCodeRequest, h CodeHandlers) (*Execution, error) {
	resp, err := c.send(ctx, &request{
		method: http.MethodPost,
		path:   pathf("/v1/sandboxes/%s/code/run", id),
		json:   req,
		accept: "application/x-ndjson",
	})
	if err != nil {
		return nil, fmt.Errorf("run code in sandbox %s: %w", id, err)
	}
	d := newLineDecoder(resp.Body, c.maxEvent)
	defer d.close()
	ex := &Execution{}
	for {
		var raw json.RawMessage
		err := d.next(&raw)
		if errors.Is(err, io.EOF) {
			return ex, fmt.Errorf("run code in sandbox %s: %w", id, io.ErrUnexpectedEOF)
		}
		if err != nil {
			return ex, fmt.Errorf("run code in sandbox %s: %w", id, err)
		}
		var ev codeEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return ex, fmt.Errorf("run code in sandbox %s: decode event: %w", id, err)
		}
		switch ev.Type {
		case "stdout":
			ex.Logs.Stdout = append(ex.Logs.Stdout, ev.Text)
			if h.OnStdout != nil {
				h.OnStdout(ev.Text)
			}
		case "stderr":
			ex.Logs.Stderr = append(ex.Logs.Stderr, ev.Text)
			if h.OnStderr != nil {
				h.OnStderr(ev.Text)
			}
		case "result":
			var r CodeResult
			if err := json.Unmarshal(raw, &r); err != nil {
				return ex, fmt.Errorf("run code in sandbox %s: decode result: %w", id, err)
			}
			ex.Results = append(ex.Results, r)
			if h.OnResult != nil {
				h.OnResult(r)
			}
		case "error":
			ex.Error = &CodeError{Name: ev.Name, Value: ev.Value, Traceback: ev.Traceback}
			if h.OnError != nil {
				h.OnError(ex.Error)
			}
		case "number_of_executions":
			ex.ExecutionCount = ev.ExecutionCount
		case "end_of_execution":
			return ex, nil
		case "unexpected_end_of_execution":
			return ex, fmt.Errorf("run code in sandbox %s: the stream ended unexpectedly", id)
		}
	}
}

// CodeContext is an interpreter context: its own interpreter process and state.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CreateCodeContextRequest configures [Client.CreateCodeContext]; zero values take the
// defaults (python, the user's home, the sandbox's user).
type CreateCodeContextRequest struct {
	Language string `json:"language,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
	User     string `json:"user,omitempty"`
}

// CreateCodeContext starts a new interpreter context.
func (c *Client) CreateCodeContext(ctx context.Context, id string, req CreateCodeContextRequest) (CodeContext, error) {
	var out CodeContext
	err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/sandboxes/%s/code/contexts", id), json: req}, &out)
	if err != nil {
		return out, fmt.Errorf("create code context in sandbox %s: %w", id, err)
	}
	return out, nil
}

// CodeContexts lists the sandbox's interpreter contexts.
func (c *Client) CodeContexts(ctx context.Context, id string) ([]CodeContext, error) {
	var out struct {
		Contexts []CodeContext `json:"contexts"`
	}
	err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/sandboxes/%s/code/contexts", id), idempotent: true}, &out)
	if err != nil {
		return nil, fmt.Errorf("list code contexts in sandbox %s: %w", id, err)
	}
	return out.Contexts, nil
}

// RestartCodeContext replaces a context's interpreter: its state is lost.
func (c *Client) RestartCodeContext(ctx context.Context, id, contextID string) error {
	err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/sandboxes/%s/code/contexts/%s/restart", id, contextID)}, nil)
	if err != nil {
		return fmt.Errorf("restart code context %s in sandbox %s: %w", contextID, id, err)
	}
	return nil
}

// InterruptCodeContext interrupts the cell running in a context, if any.
func (c *Client) InterruptCodeContext(ctx context.Context, id, contextID string) error {
	err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/sandboxes/%s/code/contexts/%s/interrupt", id, contextID)}, nil)
	if err != nil {
		return fmt.Errorf("interrupt code context %s in sandbox %s: %w", contextID, id, err)
	}
	return nil
}

// DeleteCodeContext ends a context.
func (c *Client) DeleteCodeContext(ctx context.Context, id, contextID string) error {
	err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/sandboxes/%s/code/contexts/%s", id, contextID)}, nil)
	if err != nil {
		return fmt.Errorf("delete code context %s in sandbox %s: %w", contextID, id, err)
	}
	return nil
}
