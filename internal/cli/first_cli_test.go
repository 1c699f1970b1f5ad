package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func TestParseCPU(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  bool
	}{
		{"2", 2000, false}, {"0.5", 500, false}, {"1.25", 1250, false}, {"500m", 500, false},
		{"0.0005", 0, true}, {"x", 0, true}, {"0", 0, true}, {"-1", 0, true}, {"m", 0, true}, {"", 0, true},
	} {
		got, err := parseCPU(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseCPU(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestParseMiB(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  bool
	}{
		{"512", 512, false}, {"512m", 512, false}, {"512M", 512, false}, {"512MiB", 512, false},
		{"1g", 1024, false}, {"1G", 1024, false}, {"10G", 10240, false}, {"1.5g", 1536, false},
		{"2GiB", 2048, false}, {"1t", 1 << 20, false}, {"0.3m", 0, true}, {"1x", 0, true}, {"g", 0, true}, {"0", 0, true},
	} {
		got, err := parseMiB(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseMiB(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestFlagWords(t *testing.T) {
	err := fmt.Errorf("create sandbox: %w", &warden.Error{Status: 422, Code: warden.CodeValidationFailed, Message: "cpu_millis: must be between 100 and 1024000"})
	got := flagWords(err)
	if !strings.Contains(got.Error(), "--cpu: must be between 0.1 and 1024 CPUs") || strings.Contains(got.Error(), "cpu_millis") {
		t.Errorf("flagWords: %q", got)
	}
	if !warden.IsValidationFailed(got) {
		t.Error("flagWords lost the wrapped error")
	}
	err = fmt.Errorf("create sandbox: %w", &warden.Error{Status: 422, Code: warden.CodeValidationFailed, Message: "memory_mb: must be between 16 and 1048576"})
	if got := flagWords(err).Error(); !strings.Contains(got, "--memory: must be between 16m and 1024g") {
		t.Errorf("flagWords: %q", got)
	}
}

// TestHintsNameTheRemedy checks that each kind of missing object points at the command
// that lists its kind, and a permission error inside the sandbox at --user.
func TestHintsNameTheRemedy(t *testing.T) {
	r := &runner{cmd: &command{name: "warden"}}
	nf := func(op, msg string) error {
		return fmt.Errorf("%s: %w", op, &warden.Error{Status: 404, Code: warden.CodeNotFound, Message: msg})
	}
	for _, tc := range []struct {
		name string
		err  error
		hint string
	}{
		{"sandbox", nf("get sandbox sb-1", "sandbox sb-1 not found"), "'warden sandbox ls'"},
		{"template", nf("get template py", "not found"), "'warden template ls'"},
		{"secret", nf("delete secret sec-1", "not found"), "'warden secret ls'"},
		{"principal", nf("create key", "principal pr-x not found"), "'warden principals ls'"},
		{"key", nf("revoke key key-1", "not found"), "'warden keys ls'"},
		{"file", nf("read /nope in sandbox sb-1", "open /nope: no such file or directory"), "'warden fs ls ID DIR'"},
		{"process", nf("signal process 7 in sandbox sb-1", "process with pid 7 not found"), "'warden process ls ID'"},
		{"permission", fmt.Errorf("read /root/x in sandbox sb-1: %w", &warden.Error{Status: 403, Code: warden.CodePermissionDenied, Message: "in the sandbox: open /root/x: permission denied"}), "--user"},
		{"scope", fmt.Errorf("create sandbox: %w", &warden.Error{Status: 403, Code: warden.CodeForbidden, Message: "missing scope"}), "lacks the scope"},
	} {
		_, hint, _ := r.describe(tc.err)
		if !strings.Contains(hint, tc.hint) {
			t.Errorf("%s: hint %q, want it to contain %q", tc.name, hint, tc.hint)
		}
		if tc.name != "sandbox" && tc.name != "scope" && strings.Contains(hint, "sandbox ls") {
			t.Errorf("%s: hint %q points at 'sandbox ls'", tc.name, hint)
		}
		if tc.name == "permission" && strings.Contains(hint, "scope") {
			t.Errorf("permission error inside the sandbox blamed on the key's scope: %q", hint)
		}
	}
}

func TestStartFailureExitStatus(t *testing.T) {
	notFound := fmt.Errorf("start process in sandbox sb-1: %w", &warden.Error{Status: 404, Code: warden.CodeNotFound,
		Message: `start "nope" as user in /home/user: executable "nope" not found in PATH "/usr/bin": file does not exist`})
	r := &runner{cmd: &command{name: "warden"}}
	if _, _, code := r.describe(startFailure(notFound, "nope")); code != 127 {
		t.Errorf("missing executable: exit %d, want 127", code)
	}
	denied := fmt.Errorf("start process in sandbox sb-1: %w", &warden.Error{Status: 403, Code: warden.CodePermissionDenied,
		Message: `in the sandbox: start "/x" as user in /: permission denied`})
	if _, _, code := r.describe(startFailure(denied, "/x")); code != 126 {
		t.Errorf("not executable: exit %d, want 126", code)
	}
	sandboxGone := fmt.Errorf("start process in sandbox sb-1: %w", &warden.Error{Status: 404, Code: warden.CodeNotFound, Message: "sandbox sb-1 not found"})
	if _, _, code := r.describe(startFailure(sandboxGone, "ls")); code != 1 {
		t.Errorf("missing sandbox: exit %d, want 1", code)
	}
	// The agent's own wording ("start: executable ... not found").
	agentWords := fmt.Errorf("start process in sandbox sb-1: %w", &warden.Error{Status: 404, Code: warden.CodeNotFound,
		Message: `start: executable "nope" not found in PATH "/bin": file does not exist`})
	if _, _, code := r.describe(startFailure(agentWords, "nope")); code != 127 {
		t.Errorf("missing sandbox: exit %d, want 1", code)
	}
	if got := startFailure(errors.New("x"), "ls"); got.Error() != "x" {
		t.Errorf("other error changed: %v", got)
	}
}

func TestFormatting(t *testing.T) {
	if got := sizeOf(0); got != "0 B" {
		t.Errorf("sizeOf(0) = %q", got)
	}
	if got := bytesIEC(0); got != "0 B" {
		t.Errorf("bytesIEC(0) = %q", got)
	}
	for _, d := range []warden.NetworkDenial{{Proto: "tcp", Target: "tcp 10.0.0.1:80"}, {Proto: "tcp", Target: "10.0.0.1:80"}} {
		if got := denialTarget(d); got != "tcp 10.0.0.1:80" {
			t.Errorf("denialTarget(%+v) = %q", d, got)
		}
	}
	for in, want := range map[string]bool{"./x.tar": true, "/tmp/x": true, "img.tar.gz": true, "python:3.12": false, "reg.example.com/app:1": false} {
		if looksLocal(in) != want {
			t.Errorf("looksLocal(%q) = %v", in, !want)
		}
	}
}
