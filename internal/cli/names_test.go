package cli

import (
	"fmt"
	"strings"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// The daemon's refusals of a sandbox name read in the CLI's words: a
// malformed name names the --name flag, a taken one says what to do.
func TestNameFlagWords(t *testing.T) {
	bad := fmt.Errorf("create sandbox: %w", &warden.Error{Status: 422, Code: warden.CodeValidationFailed,
		Message: `name: "Web" is not a valid sandbox name (it contains 'W'); a name is ...`, RequestID: "req-1"})
	got := nameFlagWords(bad, "--name")
	if msg := got.Error(); !strings.HasPrefix(msg, `create sandbox: validation_failed: --name: "Web" is not a valid sandbox name`) {
		t.Errorf("malformed: %q", msg)
	}
	if !hasCode(got, warden.CodeValidationFailed) {
		t.Errorf("the reworded error lost its code: %v", got)
	}

	taken := fmt.Errorf("create sandbox: %w", &warden.Error{Status: 409, Code: warden.CodeConflict,
		Message: `name "web" is taken by live sandbox sb-1 of the same owner`, RequestID: "req-2"})
	r := &runner{}
	msg, hint, code := r.describe(nameFlagWords(taken, "--name"))
	if !strings.Contains(msg, "sb-1") || !strings.Contains(hint, "--name") || !strings.Contains(hint, "kill") || code != ExitError {
		t.Errorf("taken: %q, hint %q, code %d", msg, hint, code)
	}

	other := fmt.Errorf("create sandbox: %w", &warden.Error{Status: 422, Code: warden.CodeValidationFailed, Message: "user: bad"})
	if got := nameFlagWords(other, "--name"); got != other {
		t.Errorf("another field's error changed: %v", got)
	}
}
