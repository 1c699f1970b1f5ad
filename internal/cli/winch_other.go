//go:build !unix

package cli

// notifyWinch does nothing where there is no SIGWINCH: the remote terminal keeps the size
// it started with.
func notifyWinch(f func()) (stop func()) { return func() {} }
