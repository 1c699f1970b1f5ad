package backend

import "context"

// FSCapturer is implemented by backends that can copy a sandbox's writable
// layers out while it lives (filesystem snapshots, internal/snapshot).
//
// CaptureFS copies, for each layer target of the sandbox whose writable
// layer holds anything, that layer into the empty host directory dir
// returns for the target, in the form template layers are stored in
// (overlayfs: whiteouts as 0/0 character devices, opaque directories
// marked with the user.overlay.opaque xattr; files owned by the ids the
// sandbox sees). It does not stop the sandbox; the caller makes the copy
// consistent (it pauses the sandbox around the call). A sandbox whose
// writable layer the host cannot reach gets an error wrapping
// ErrUnsupported, before anything is written.
type FSCapturer interface {
	CaptureFS(ctx context.Context, h Handle, dir func(target string) (string, error)) error
}
