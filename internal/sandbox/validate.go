package sandbox

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/template"
)

// Bounds of a sandbox request. They are checked here, once, for every door
// (the native API, the E2B API, the CLI through the SDK); the doors only
// decode. Timeouts are bounded by Config.MaxTimeout (the daemon's
// max_timeout), not by a constant. spec/openapi.yaml documents the same
// numbers.
const (
	MinCPUMillis     = 100
	MaxCPUMillis     = 1024 * 1000
	MinMemoryMB      = 16
	MaxMemoryMB      = 1 << 20
	MinDiskMB        = 16
	MaxDiskMB        = 1 << 20
	MaxTemplateName  = 128
	MaxEnv           = 256       // variables
	MaxEnvName       = 256       // bytes
	MaxEnvValue      = 128 << 10 // bytes
	MaxMetadata      = 64        // keys
	MaxMetadataKey   = 128       // bytes
	MaxMetadataValue = 1024      // bytes
	MaxUser          = 32        // bytes
	MaxWorkdir       = 4096      // bytes
)

// MaxTimeout is the longest timeout a sandbox may be given (the daemon's
// max_timeout; 24 h by default).
func (m *Manager) MaxTimeout() time.Duration { return m.cfg.MaxTimeout }

// CheckTimeout refuses a timeout outside 1 s to Config.MaxTimeout, with an
// error wrapping ErrInvalid. Create, SetTimeout and Fork call it; a door
// calls it itself only to refuse before a side effect (E2B's connect
// resumes before it sets the timeout).
func (m *Manager) CheckTimeout(d time.Duration) error {
	if d < time.Second || d > m.cfg.MaxTimeout {
		return fmt.Errorf("%w: timeout must be between 1 and %d seconds", ErrInvalid, int64(m.cfg.MaxTimeout/time.Second))
	}
	return nil
}

// validate fills a create request's defaults and refuses what is out of
// bounds, with errors wrapping ErrInvalid. Zero numbers mean the default.
func (m *Manager) validate(req *CreateRequest) error {
	if req.Template == "" {
		req.Template = template.BaseName
	}
	if req.Timeout == 0 && req.IdleTimeout == 0 {
		req.Timeout = m.cfg.DefaultTimeout
	}
	if len(req.Template) > MaxTemplateName {
		return fmt.Errorf("%w: template: at most %d bytes", ErrInvalid, MaxTemplateName)
	}
	if req.Timeout != 0 || req.IdleTimeout == 0 { // an idle timeout alone: no countdown
		if err := m.CheckTimeout(req.Timeout); err != nil {
			return err
		}
	}
	switch {
	case req.CPUMillis != 0 && (req.CPUMillis < MinCPUMillis || req.CPUMillis > MaxCPUMillis):
		return fmt.Errorf("%w: cpu_millis must be between %d and %d", ErrInvalid, MinCPUMillis, MaxCPUMillis)
	case req.MemoryMB != 0 && (req.MemoryMB < MinMemoryMB || req.MemoryMB > MaxMemoryMB):
		return fmt.Errorf("%w: memory_mb must be between %d and %d", ErrInvalid, MinMemoryMB, MaxMemoryMB)
	case req.DiskMB != 0 && (req.DiskMB < MinDiskMB || req.DiskMB > MaxDiskMB):
		return fmt.Errorf("%w: disk_mb must be between %d and %d", ErrInvalid, MinDiskMB, MaxDiskMB)
	}
	if err := checkMetadata(req.Metadata, 0); err != nil {
		return err
	}
	if err := CheckEnv(req.Env); err != nil {
		return err
	}
	if err := CheckUser(req.User); err != nil {
		return err
	}
	if err := checkWorkdir(req.Workdir); err != nil {
		return err
	}
	if req.Network != nil {
		p, err := req.Network.Normalized()
		if err != nil {
			return fmt.Errorf("%w: network: %w", ErrInvalid, err)
		}
		if p.Mode != network.ModeNone && m.cfg.Net == nil {
			return fmt.Errorf("%w: network mode %s: this daemon has no sandbox networking", ErrInvalid, p.Mode)
		}
		req.Network = &p
	}
	if req.Isolation == "" {
		req.Isolation = m.b.ID()
	}
	b, ok := m.backend(req.Isolation)
	if !ok && m.cfg.Probe != nil && m.cfg.Probe(req.Isolation) {
		b, ok = m.backend(req.Isolation)
	}
	if !ok {
		return fmt.Errorf("%w: isolation %q is not available on this daemon (available: %s)", ErrInvalid, clip(req.Isolation), strings.Join(m.Backends(), ", "))
	}
	if err := m.checkVolumes(b, req); err != nil {
		return err
	}
	if err := m.checkLifetime(b, req); err != nil {
		return err
	}
	if (req.AutoPause || req.AutoResume) && !b.Capabilities().Pause {
		return fmt.Errorf("%w: auto_pause and auto_resume need a backend that can pause; %s cannot", ErrInvalid, b.ID())
	}
	if req.AutoPauseCold {
		switch {
		case !req.AutoPause:
			return fmt.Errorf("%w: a pause without memory at the timeout needs auto_pause", ErrInvalid)
		case req.AutoResume:
			return fmt.Errorf("%w: a sandbox paused without its memory is resumed only when asked: auto_resume cannot go with it", ErrInvalid)
		case !b.Capabilities().ColdRestart:
			return fmt.Errorf("%w: backend %s cannot pause a sandbox without its memory", ErrInvalid, b.ID())
		}
	}
	if req.Network != nil && req.Network.Mode != network.ModeNone {
		if !hasNetwork(b) {
			return fmt.Errorf("%w: network mode %s is not available on backend %s (only none)", ErrInvalid, req.Network.Mode, b.ID())
		}
	}
	return nil
}

// checkMetadata refuses labels out of bounds; have is how many keys the
// sandbox already holds (a fork adds to its source's).
func checkMetadata(md map[string]string, have int) error {
	if len(md)+have > MaxMetadata {
		return fmt.Errorf("%w: metadata: at most %d keys", ErrInvalid, MaxMetadata)
	}
	for k, v := range md {
		switch {
		case k == "" || len(k) > MaxMetadataKey:
			return fmt.Errorf("%w: metadata: keys must be 1 to %d bytes", ErrInvalid, MaxMetadataKey)
		case strings.ContainsAny(k, ",:"):
			return fmt.Errorf("%w: metadata: key %q: must not contain ',' or ':' (they separate list filters)", ErrInvalid, clip(k))
		case len(v) > MaxMetadataValue:
			return fmt.Errorf("%w: metadata: value of %q: at most %d bytes", ErrInvalid, clip(k), MaxMetadataValue)
		case strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0):
			return fmt.Errorf("%w: metadata: keys and values must not contain NUL", ErrInvalid)
		}
	}
	return nil
}

// CheckEnv refuses environment variables a process could not be given
// (a sandbox's, and an exec's at the API), with an error wrapping ErrInvalid.
func CheckEnv(env map[string]string) error {
	if len(env) > MaxEnv {
		return fmt.Errorf("%w: env: at most %d variables", ErrInvalid, MaxEnv)
	}
	for k, v := range env {
		if k == "" || len(k) > MaxEnvName || strings.ContainsAny(k, "=\x00") || !utf8.ValidString(k) {
			return fmt.Errorf("%w: env: %q is not a valid variable name", ErrInvalid, clip(k))
		}
		if strings.ContainsRune(v, 0) || len(v) > MaxEnvValue {
			return fmt.Errorf("%w: env: value of %s: must not contain NUL and be at most %d KiB", ErrInvalid, clip(k), MaxEnvValue>>10)
		}
	}
	return nil
}

// CheckUser refuses user names that are not plain /etc/passwd names, with
// an error wrapping ErrInvalid ("" is the template's user). '|' is refused
// too: the API's presigned URL signatures rely on it.
func CheckUser(u string) error {
	if u == "" {
		return nil
	}
	if len(u) > MaxUser || !utf8.ValidString(u) || strings.ContainsFunc(u, func(r rune) bool {
		return r <= 0x20 || r == 0x7f || r == ':' || r == '/' || r == '|'
	}) {
		return fmt.Errorf("%w: user: %q is not a valid user name", ErrInvalid, clip(u))
	}
	return nil
}

// checkWorkdir refuses a working directory that is not a clean absolute
// path ("" is the template's).
func checkWorkdir(p string) error {
	switch {
	case p == "":
		return nil
	case len(p) > MaxWorkdir:
		return fmt.Errorf("%w: workdir: longer than %d bytes", ErrInvalid, MaxWorkdir)
	case !utf8.ValidString(p):
		return fmt.Errorf("%w: workdir: not valid UTF-8", ErrInvalid)
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%w: workdir: contains a NUL or control character", ErrInvalid)
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w: workdir: %q is not an absolute path", ErrInvalid, clip(p))
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." || el == "." {
			return fmt.Errorf("%w: workdir: %q has a %q element; give a clean absolute path", ErrInvalid, clip(p), el)
		}
	}
	return nil
}

// clip shortens a caller's value for an error message.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}
