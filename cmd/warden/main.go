// Command warden is the command-line client of the Warden sandbox daemon, wardend. It
// talks to the daemon only through the Go SDK; see internal/cli for the commands.
//
//	warden sandbox create
//	warden exec sb-01hzx3k9q2 -- ls -l /
//	warden help
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/warden-sandbox/warden/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills warden at once
	}()
	os.Exit(cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
