// Package mw runs middleware: administrator-written JavaScript hooks
// (github.com/dop251/goja) on the governed path. A middleware is a named
// script that defines pre(action) and/or post(action, result); each returns
// a verdict: {allow: true}, {block: "message"} or {modify: value} (the
// changed arguments before a call, the changed result after it). MintMCP's
// forms ({action: "allow"}, {action: "block", reason}, {action: "mask",
// maskedArguments | maskedResult}) are accepted too, so its templates port.
//
// Every call runs in a fresh runtime (the compiled program is shared), so
// nothing a script leaves in its globals reaches another call, or another
// principal. Limits: a time limit (the runtime is interrupted by a timer,
// so while(true){} ends), a bounded call stack (deep recursion throws), a
// memory watchdog (the process's live heap is sampled while a script runs;
// growth past the limit interrupts it, so for(;;) s+=s ends before it takes
// the daemon down), at most MaxFetches fetch calls per call, only to the
// middleware's allowed domains and through internal/network/safedial, and
// 1 MiB caps on what goes in and comes out. A script that fails (throws,
// runs out of time or memory, returns no verdict) gets its onError outcome:
// "closed" (the default) refuses the action, "open" lets it through.
//
// The memory watchdog samples the heap of the process it runs in, so
// concurrent calls count toward it and a single allocation larger than the
// headroom is not prevented. wardend therefore runs scripts in a worker
// process (worker.go) with RLIMIT_DATA and a cgroup CPU quota of its own;
// a runaway that kills it does not fail the other calls in flight there.
// secrets.NAME reads the secrets an administrator granted to the
// middleware (Options.Secrets); their values are redacted from what a call
// reports.
package mw

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/dop251/goja"

	"github.com/warden-sandbox/warden/internal/govern"
)

// Limits and defaults.
const (
	DefaultTimeout   = 200 * time.Millisecond
	MaxTimeout       = 5 * time.Second
	DefaultMaxMemory = 64 << 20
	MaxFetches       = 5
	MaxStackDepth    = 256
	MaxIOBytes       = 1 << 20
	MaxScriptBytes   = 256 << 10
)

// OnError is what a failed middleware call does to the action.
type OnError string

// OnError values.
const (
	FailClosed OnError = "closed" // refuse the action (default)
	FailOpen   OnError = "open"   // let it through unchanged
)

// Middleware is one administrator-written hook.
type Middleware struct {
	// Name identifies it ([a-z0-9][a-z0-9_.-]*, at most 64 characters).
	Name string `json:"name" yaml:"name"`
	// Kinds are the action kinds it runs for (mcp.call, exec, ...); at
	// least one.
	Kinds []govern.Kind `json:"kinds" yaml:"kinds"`
	// Script is the JavaScript source defining pre and/or post.
	Script string `json:"script" yaml:"script"`
	// OnError is "closed" (default) or "open".
	OnError OnError `json:"on_error,omitempty" yaml:"on_error,omitempty"`
	// TimeoutMS bounds each call (0: DefaultTimeout; at most MaxTimeout).
	TimeoutMS int64 `json:"timeout_ms,omitempty" yaml:"timeout_ms,omitempty"`
	// MaxMemoryMB bounds heap growth during a call (0: DefaultMaxMemory).
	MaxMemoryMB int64 `json:"max_memory_mb,omitempty" yaml:"max_memory_mb,omitempty"`
	// AllowedDomains are the hosts fetch may reach: "api.example.com" or
	// "*.example.com" (subdomains only). Empty: no fetch.
	AllowedDomains []string `json:"allowed_domains,omitempty" yaml:"allowed_domains,omitempty"`
	// Secrets are the secret names the script may read (secrets.NAME).
	Secrets []string `json:"secrets,omitempty" yaml:"secrets,omitempty"`
	// Disabled middleware is kept but not run.
	Disabled bool `json:"disabled,omitempty" yaml:"disabled,omitempty"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ErrInvalid is a malformed middleware.
var ErrInvalid = errors.New("invalid middleware")

// Validate checks m and fills its defaults.
func (m *Middleware) Validate() error {
	if !nameRE.MatchString(m.Name) {
		return fmt.Errorf("%w: name %q must match %s", ErrInvalid, m.Name, nameRE)
	}
	if len(m.Kinds) == 0 {
		return fmt.Errorf("%w %s: no kinds", ErrInvalid, m.Name)
	}
	for _, k := range m.Kinds {
		if !k.Known() {
			return fmt.Errorf("%w %s: unknown kind %q", ErrInvalid, m.Name, k)
		}
	}
	switch m.OnError {
	case "":
		m.OnError = FailClosed
	case FailClosed, FailOpen:
	default:
		return fmt.Errorf("%w %s: on_error %q is not open or closed", ErrInvalid, m.Name, m.OnError)
	}
	if m.TimeoutMS < 0 || time.Duration(m.TimeoutMS)*time.Millisecond > MaxTimeout {
		return fmt.Errorf("%w %s: timeout_ms must be between 0 and %d", ErrInvalid, m.Name, MaxTimeout.Milliseconds())
	}
	if m.MaxMemoryMB < 0 || m.MaxMemoryMB > 1024 {
		return fmt.Errorf("%w %s: max_memory_mb must be between 0 and 1024", ErrInvalid, m.Name)
	}
	if len(m.Script) > MaxScriptBytes {
		return fmt.Errorf("%w %s: script larger than %d bytes", ErrInvalid, m.Name, MaxScriptBytes)
	}
	for _, d := range m.AllowedDomains {
		h := strings.TrimPrefix(d, "*.")
		if h == "" || strings.ContainsAny(h, "/:*@ ") {
			return fmt.Errorf("%w %s: allowed domain %q must be a host name or *.domain", ErrInvalid, m.Name, d)
		}
	}
	for _, s := range m.Secrets {
		if s == "" {
			return fmt.Errorf("%w %s: empty secret name", ErrInvalid, m.Name)
		}
	}
	return nil
}

func (m *Middleware) timeout() time.Duration {
	if m.TimeoutMS == 0 {
		return DefaultTimeout
	}
	return time.Duration(m.TimeoutMS) * time.Millisecond
}

func (m *Middleware) maxMemory() uint64 {
	if m.MaxMemoryMB == 0 {
		return DefaultMaxMemory
	}
	return uint64(m.MaxMemoryMB) << 20
}

func (m *Middleware) runsFor(k govern.Kind) bool { return !m.Disabled && slices.Contains(m.Kinds, k) }

func (m *Middleware) domainAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, d := range m.AllowedDomains {
		d = strings.ToLower(d)
		if suf, ok := strings.CutPrefix(d, "*."); ok {
			if strings.HasSuffix(host, "."+suf) {
				return true
			}
		} else if host == d {
			return true
		}
	}
	return false
}

// compiled is a validated middleware and its program.
type compiled struct {
	Middleware
	prog *goja.Program
}

func compile(m Middleware) (*compiled, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	prog, err := goja.Compile(m.Name+".js", m.Script, true)
	if err != nil {
		return nil, fmt.Errorf("%w %s: compile: %w", ErrInvalid, m.Name, err)
	}
	return &compiled{Middleware: m, prog: prog}, nil
}

// Verdict is the outcome of one middleware call.
type Verdict struct {
	Middleware string `json:"middleware"`
	// Action is allow, block, modify or error.
	Action  string `json:"action"`
	Message string `json:"message,omitempty"`
	// Modified is the replacement value (modify).
	Modified json.RawMessage `json:"modified,omitempty"`
	// Error says why the call failed (error); OnError what followed.
	Error   string        `json:"error,omitempty"`
	OnError OnError       `json:"on_error,omitempty"`
	Elapsed time.Duration `json:"elapsed_ns"`
}
