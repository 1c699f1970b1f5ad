// Command wardend is Warden's daemon: the HTTP API, the sandbox manager, the
// store, identities and the audit log. Run it as root.
//
//	wardend [--config FILE] [--listen ADDR] [--socket PATH] [--state-dir DIR] ...
//	wardend install [--unit PATH] [--enable] [-- FLAGS]   (a systemd unit)
//	wardend uninstall [--unit PATH]
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	_ "github.com/warden-sandbox/warden/internal/backend/all" // the backends this build ships
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/daemon"
	"github.com/warden-sandbox/warden/internal/mw"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "install":
			os.Exit(install(os.Args[2:], os.Stdout, os.Stderr))
		case "uninstall":
			os.Exit(uninstall(os.Args[2:], os.Stdout, os.Stderr))
		case mw.WorkerCommand: // hidden: the middleware worker wardend starts (internal/mw/worker.go)
			if err := mw.ServeWorker(os.Stdin, os.Stdout); err != nil {
				fmt.Fprintln(os.Stderr, "wardend mw-worker:", err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	fs := flag.NewFlagSet("wardend", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "wardend: Warden's daemon (run as root)\n\nUsage: wardend [flags]\n       wardend install [--enable] [-- flags]   write a systemd unit (see wardend install --help)\n       wardend uninstall                       remove it\n\nSettings come from defaults, then the config file, then WARDEN_* environment variables, then flags.\nOn first start it creates an admin API key in <state-dir>/admin.key (root only).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	cfg, err := config.Load(os.Args[1:], os.Getenv, fs)
	if err == flag.ErrHelp {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wardend:", err)
		os.Exit(2)
	}
	level := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}[cfg.LogLevel]
	var h slog.Handler = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	}
	log := slog.New(h)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg, log, nil); err != nil {
		log.Error("wardend stopped", "err", err)
		os.Exit(1)
	}
}
