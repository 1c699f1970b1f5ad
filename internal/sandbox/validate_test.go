package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/template"
)

// validateBackend is the least a backend needs for validate: an ID and
// capabilities (no pause, no network).
type validateBackend struct{ backend.Backend }

func (validateBackend) ID() string                         { return "stub" }
func (validateBackend) Capabilities() backend.Capabilities { return backend.Capabilities{} }

// TestValidateCreate is the table of what a create request may ask for,
// checked once in the manager for every door, with the timeout bounded by
// the configured MaxTimeout (here 1 h), not by a constant.
func TestValidateCreate(t *testing.T) {
	m := New(Config{MaxTimeout: time.Hour, DefaultTimeout: time.Minute}, nil, validateBackend{}, nil, slog.New(slog.DiscardHandler))
	long := func(n int) string { return strings.Repeat("a", n) }
	cases := []struct {
		name string
		req  CreateRequest
		want string // "" accepted; otherwise a substring of the error
	}{
		{"defaults", CreateRequest{}, ""},
		{"timeout at max_timeout", CreateRequest{Timeout: time.Hour}, ""},
		{"timeout over max_timeout", CreateRequest{Timeout: time.Hour + time.Second}, "timeout must be between 1 and 3600 seconds"},
		{"timeout 2 h over 1 h max", CreateRequest{Timeout: 2 * time.Hour}, "timeout must be between 1 and 3600 seconds"},
		{"timeout 30 min", CreateRequest{Timeout: 30 * time.Minute}, ""},
		{"explicit zero timeout from a door", CreateRequest{Timeout: -time.Second}, "timeout must be between 1 and 3600 seconds"},
		{"sub-second timeout", CreateRequest{Timeout: time.Millisecond}, "timeout must be between"},
		{"cpu at min", CreateRequest{CPUMillis: MinCPUMillis}, ""},
		{"cpu under min", CreateRequest{CPUMillis: MinCPUMillis - 1}, "cpu_millis must be between 100 and 1024000"},
		{"cpu -1 (explicit zero)", CreateRequest{CPUMillis: -1}, "cpu_millis"},
		{"cpu over max", CreateRequest{CPUMillis: MaxCPUMillis + 1}, "cpu_millis"},
		{"memory under min", CreateRequest{MemoryMB: 15}, "memory_mb must be between 16 and 1048576"},
		{"memory at max", CreateRequest{MemoryMB: MaxMemoryMB}, ""},
		{"disk over max", CreateRequest{DiskMB: MaxDiskMB + 1}, "disk_mb must be between 16 and 1048576"},
		{"template at max length", CreateRequest{Template: long(MaxTemplateName)}, ""},
		{"template too long", CreateRequest{Template: long(MaxTemplateName + 1)}, "template: at most 128 bytes"},
		{"isolation unknown", CreateRequest{Isolation: "kvm"}, `isolation "kvm" is not available on this daemon (available: stub)`},
		{"isolation registered", CreateRequest{Isolation: "stub"}, ""},
		{"auto_pause on a backend that cannot pause", CreateRequest{AutoPause: true}, "auto_pause and auto_resume need a backend that can pause"},
		{"network open without networking", CreateRequest{Network: &network.Policy{Mode: network.ModeOpen}}, "this daemon has no sandbox networking"},
		{"network none", CreateRequest{Network: &network.Policy{Mode: network.ModeNone}}, ""},
		{"env ok", CreateRequest{Env: map[string]string{"K": "V"}}, ""},
		{"env name with =", CreateRequest{Env: map[string]string{"A=B": "V"}}, "is not a valid variable name"},
		{"env name not utf-8", CreateRequest{Env: map[string]string{"\xff": "V"}}, "is not a valid variable name"},
		{"env name too long", CreateRequest{Env: map[string]string{long(MaxEnvName + 1): "V"}}, "is not a valid variable name"},
		{"env value with NUL", CreateRequest{Env: map[string]string{"K": "a\x00b"}}, "must not contain NUL"},
		{"env value too long", CreateRequest{Env: map[string]string{"K": long(MaxEnvValue + 1)}}, "at most 128 KiB"},
		{"too many env", CreateRequest{Env: manyKeys(MaxEnv + 1)}, "env: at most 256 variables"},
		{"metadata ok", CreateRequest{Metadata: map[string]string{"k": "v"}}, ""},
		{"metadata at max keys", CreateRequest{Metadata: manyKeys(MaxMetadata)}, ""},
		{"too many metadata", CreateRequest{Metadata: manyKeys(MaxMetadata + 1)}, "metadata: at most 64 keys"},
		{"metadata empty key", CreateRequest{Metadata: map[string]string{"": "v"}}, "keys must be 1 to 128 bytes"},
		{"metadata key with :", CreateRequest{Metadata: map[string]string{"a:b": "v"}}, "must not contain ',' or ':'"},
		{"metadata value too long", CreateRequest{Metadata: map[string]string{"k": long(MaxMetadataValue + 1)}}, "at most 1024 bytes"},
		{"metadata NUL", CreateRequest{Metadata: map[string]string{"k": "\x00"}}, "must not contain NUL"},
		{"user ok", CreateRequest{User: "root"}, ""},
		{"user with /", CreateRequest{User: "a/b"}, "is not a valid user name"},
		{"user with |", CreateRequest{User: "a|b"}, "is not a valid user name"},
		{"user too long", CreateRequest{User: long(MaxUser + 1)}, "is not a valid user name"},
		{"workdir ok", CreateRequest{Workdir: "/home/user"}, ""},
		{"workdir relative", CreateRequest{Workdir: "home"}, "is not an absolute path"},
		{"workdir with ..", CreateRequest{Workdir: "/a/../b"}, `has a ".." element`},
		{"workdir control char", CreateRequest{Workdir: "/a\nb"}, "control character"},
		{"workdir too long", CreateRequest{Workdir: "/" + long(MaxWorkdir)}, "longer than 4096 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			err := m.validate(&req)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if req.Template == "" || req.Timeout == 0 || req.Isolation == "" {
					t.Errorf("defaults not filled: template %q timeout %v isolation %q", req.Template, req.Timeout, req.Isolation)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want an error with %q", c.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q lacks %q", err, c.want)
			}
		})
	}

	// The defaults: base template, the configured default timeout, the
	// default backend.
	var req CreateRequest
	if err := m.validate(&req); err != nil {
		t.Fatal(err)
	}
	if req.Template != template.BaseName || req.Timeout != time.Minute || req.Isolation != "stub" {
		t.Errorf("defaults: template %q timeout %v isolation %q", req.Template, req.Timeout, req.Isolation)
	}
}

// TestCheckTimeoutFollowsConfig: the bound of every timeout (create,
// SetTimeout, fork, E2B connect) is the configured max_timeout, and 24 h
// when none is configured.
func TestCheckTimeoutFollowsConfig(t *testing.T) {
	for _, c := range []struct {
		max      time.Duration
		d        time.Duration
		accepted bool
	}{
		{0, 24 * time.Hour, true},
		{0, 24*time.Hour + time.Second, false},
		{48 * time.Hour, 30 * time.Hour, true},
		{48 * time.Hour, 49 * time.Hour, false},
		{time.Hour, 30 * time.Minute, true},
		{time.Hour, 2 * time.Hour, false},
		{time.Hour, 0, false},
		{time.Hour, -time.Second, false},
	} {
		m := New(Config{MaxTimeout: c.max}, nil, validateBackend{}, nil, slog.New(slog.DiscardHandler))
		err := m.CheckTimeout(c.d)
		if (err == nil) != c.accepted {
			t.Errorf("max_timeout %v, timeout %v: error %v, want accepted %v", c.max, c.d, err, c.accepted)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("max_timeout %v, timeout %v: %v does not wrap ErrInvalid", c.max, c.d, err)
		}
		if want := max(c.max, 0); want != 0 && m.MaxTimeout() != want {
			t.Errorf("MaxTimeout() = %v, want %v", m.MaxTimeout(), want)
		}
	}
}

func manyKeys(n int) map[string]string {
	out := make(map[string]string, n)
	for i := range n {
		out[fmt.Sprintf("k%d", i)] = "v"
	}
	return out
}
