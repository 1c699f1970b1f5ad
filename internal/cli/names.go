package cli

import (
	"context"
	"strings"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// nameFlagWords puts a create's or fork's refusal of a sandbox name in the CLI's words:
// a malformed name names the --name flag, and a name in use says what to do about it.
func nameFlagWords(err error, flag string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if warden.IsConflict(err) && strings.Contains(msg, "is taken by") {
		return withHint(err, "choose another %s, or end the sandbox that has it ('warden sandbox kill NAME'); "+
			"a name is free again once its sandbox has ended", flag)
	}
	// "validation_failed: name: ..." is the daemon's refusal of the request's name.
	if i := strings.Index(msg, warden.CodeValidationFailed+": name: "); i >= 0 {
		i += len(warden.CodeValidationFailed + ": ")
		return &rewordedError{msg: msg[:i] + flag + msg[i+len("name"):], err: err}
	}
	return err
}

// sandboxID returns the ID of the sandbox ref names: ref itself when it is an ID ("sb-"),
// else the live sandbox with that name. A command that makes several calls for one
// sandbox resolves a name once, so every call reaches the same sandbox and, after it has
// ended (when its name no longer resolves), the command can still ask why.
func sandboxID(ctx context.Context, cl *warden.Client, ref string) (string, error) {
	if strings.HasPrefix(ref, "sb-") {
		return ref, nil
	}
	sb, err := cl.GetSandbox(ctx, ref)
	if warden.IsForbidden(err) {
		return ref, nil // a key that may exec but not read sandboxes: the calls resolve it each
	}
	if err != nil {
		return "", err
	}
	return sb.ID, nil
}
