// Command warden-agent is Warden's in-sandbox agent. It serves exec and files
// to the host over the channel the backend provides.
//
//	warden-agent init              run as a native sandbox's PID 1 (started by wardend only)
//	warden-agent gvisor-init       run as a gVisor sandbox's PID 1 (started by runsc for wardend)
//	warden-agent serve -listen P   serve on the unix socket P (other backends, development)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/warden-sandbox/warden/internal/agent"
	"github.com/warden-sandbox/warden/internal/agent/sudo"
	"github.com/warden-sandbox/warden/internal/backend/gvisor/ginit"
	"github.com/warden-sandbox/warden/internal/backend/native/nsinit"
)

const usage = `warden-agent: Warden's in-sandbox agent

Usage:
  warden-agent init                 run as the PID 1 of a native sandbox (started by wardend)
  warden-agent gvisor-init          run as the PID 1 of a gVisor sandbox (started by runsc)
  warden-agent serve -listen PATH   serve the agent protocol on a unix socket
  warden-agent help                 show this help

The agent serves the process and filesystem services (E2B envd-compatible
Connect-RPC over HTTP/2 cleartext) and /health, /envs, /files and /tar.
`

func main() {
	if filepath.Base(os.Args[0]) == "sudo" {
		// Installed in sandboxes as sudo (see internal/agent/sudo).
		os.Exit(sudo.Main(os.Args[1:], sudo.SocketPath, os.Stderr))
	}
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "init":
		if err := nsinit.Run(); err != nil {
			slog.Error("init failed", "err", err)
			os.Exit(1)
		}
	case "gvisor-init":
		if err := ginit.Run(); err != nil {
			slog.Error("gvisor init failed", "err", err)
			os.Exit(1)
		}
	case "serve":
		fs := flag.NewFlagSet("serve", flag.ExitOnError)
		listen := fs.String("listen", "", "unix socket path to listen on")
		cfgJSON := fs.String("config", "{}", "agent config as JSON (default_user, default_workdir, env)")
		fs.Parse(os.Args[2:])
		if *listen == "" {
			fmt.Fprintln(os.Stderr, "warden-agent serve: -listen is required")
			os.Exit(2)
		}
		var cfg agent.Config
		if err := json.Unmarshal([]byte(*cfgJSON), &cfg); err != nil {
			fmt.Fprintln(os.Stderr, "warden-agent serve: bad -config:", err)
			os.Exit(2)
		}
		os.Remove(*listen)
		ln, err := net.Listen("unix", *listen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "warden-agent serve:", err)
			os.Exit(1)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		a := agent.New(cfg)
		defer a.Close()
		if err := a.Serve(ctx, ln); err != nil {
			fmt.Fprintln(os.Stderr, "warden-agent serve:", err)
			os.Exit(1)
		}
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "warden-agent: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}
