//go:build !linux

// Command warden-probe runs the sandbox escape probes; it is Linux-only.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "warden-probe: Linux only")
	os.Exit(2)
}
