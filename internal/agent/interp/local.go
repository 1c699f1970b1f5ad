package interp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// LocalAddr is where the code interpreter also listens inside a sandbox,
// as E2B's template serves it on port 49999, so code in the sandbox (curl
// localhost:49999/execute) reaches it.
const LocalAddr = "127.0.0.1:49999"

// localRetry is the pause before listening again after the listener failed.
var localRetry = time.Second

// ServeLocal serves the code-interpreter routes and GET /health ("OK") on
// addr until ctx ends, as HTTP/1.1. It keeps the port served: when listening
// fails (the port taken) or the server stops for any other reason than ctx,
// it listens again after a pause, as E2B's template restarts its server
// under a supervisor.
func (s *Service) ServeLocal(ctx context.Context, addr string) {
	mux := http.NewServeMux()
	s.Register(mux)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `"OK"`)
	})
	warned := false
	for ctx.Err() == nil {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		if err == nil {
			warned = false
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			stop := context.AfterFunc(ctx, func() { srv.Close() })
			err = srv.Serve(ln)
			stop()
		}
		if ctx.Err() != nil || errors.Is(err, http.ErrServerClosed) && ctx.Err() != nil {
			return
		}
		if !warned {
			slog.Warn("code interpreter: local listener failed; retrying", "addr", addr, "err", err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(localRetry):
		}
	}
}
