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

// LiveCapturer is an FSCapturer that makes the copy of a running sandbox
// one moment of its files itself (it stops the sandbox's tasks for the
// copy and lets them run on), so the caller must not pause the sandbox
// first: the gvisor backend, whose Pause writes the whole sandbox, memory
// included, to disk and ends its kernel.
type LiveCapturer interface {
	FSCapturer
	CapturesLive()
}

// PreCapturer is an FSCapturer that shortens the freeze of a running
// sandbox's copy: PreCaptureFS copies the writable layers while the sandbox
// runs, then calls freeze (which stops the sandbox's tasks and returns the
// function that lets them run on), copies again only what changed since the
// first pass (new, changed and deleted files; the frozen pass decides what
// the copy holds, so it is one moment of the sandbox's files), and thaws.
// The native backend. The result is what CaptureFS of the frozen sandbox
// would have written.
type PreCapturer interface {
	FSCapturer
	PreCaptureFS(ctx context.Context, h Handle, dir func(target string) (string, error), freeze func(context.Context) (thaw func(), err error)) error
}
