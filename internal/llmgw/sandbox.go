package llmgw

import "context"

type ctxSandboxKey struct{}

// WithSandbox returns a context that marks a request as a call from the
// sandbox id: the warden.internal route (internal/daemon, agentroute.go)
// sets it for the connections it serves from a sandbox's own network
// stack, so that the gateway records the call's usage for that sandbox.
// It is a context value, not a header: nothing a client sends can set or
// change it.
func WithSandbox(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxSandboxKey{}, id)
}

// SandboxOf returns the sandbox WithSandbox marked the request with, ""
// for none.
func SandboxOf(ctx context.Context) string {
	id, _ := ctx.Value(ctxSandboxKey{}).(string)
	return id
}
