//go:build unix

package cli

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyWinch calls f on every SIGWINCH until stop is called.
func notifyWinch(f func()) (stop func()) {
	ch := make(chan os.Signal, 1)
	done := make(chan struct{})
	signal.Notify(ch, syscall.SIGWINCH)
	go func() {
		for {
			select {
			case <-ch:
				f()
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}
