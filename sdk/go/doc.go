// Package warden is the Go client for the Warden HTTP API: create sandboxes, run commands
// in them, move files in and out, open terminals, and manage principals, API keys and the
// audit log.
//
// The API it speaks is described by spec/openapi.yaml in the Warden repository and
// rendered in docs/api.md. This package depends on the standard library and one WebSocket
// library (for terminals); it imports nothing from the daemon.
//
// # Connecting
//
// [New] reads WARDEN_URL and WARDEN_API_KEY from the environment; options override them.
// The URL is either http(s)://host:port or unix:///path/to/wardend.sock, which sends HTTP
// over the daemon's unix socket:
//
//	c, err := warden.New(warden.WithBaseURL("unix:///run/warden/wardend.sock"))
//
// # Sandbox names
//
// A sandbox created with [CreateSandboxRequest.Name] can be named instead of its ID in
// every method that takes a sandbox id, while it is live: the daemon resolves the name
// among the caller's sandboxes. IDs start with "sb-" and names never do.
//
// # Errors
//
// Failed calls return an error that wraps a [*Error] carrying the HTTP status, the stable
// error code, the message and the request ID. [IsNotFound], [IsConflict], [IsForbidden]
// and [IsUnauthenticated] test for the common cases:
//
//	sb, err := c.GetSandbox(ctx, id)
//	if warden.IsNotFound(err) {
//		// gone
//	}
//
// # Retries
//
// Requests that are safe to repeat (GET, PUT, DELETE, and the POSTs the spec marks
// idempotent, such as [Client.SetTimeout]) are retried on 429 and 503 responses with
// exponential backoff and jitter, honouring Retry-After. Any request is retried when the
// connection was refused before anything was sent. A streaming call is never retried once
// its response has started. See [RetryPolicy].
//
// # Streams
//
// Process output and file-system watches arrive as NDJSON streams. [Client.Exec] runs a
// command to completion, copying its output to writers and feeding its stdin from a
// reader; [Client.StartProcess] and [Client.StreamProcess] return a [ProcessStream] to read
// events one by one; [Client.Watch] returns a [WatchStream]. Cancelling the context ends a
// stream; it does not kill the process, which keeps running in the sandbox.
package warden
