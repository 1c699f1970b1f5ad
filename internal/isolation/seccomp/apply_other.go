//go:build !linux

package seccomp

import (
	"errors"
	"fmt"

	"golang.org/x/net/bpf"
)

// Apply is Linux-only.
func Apply() error {
	return fmt.Errorf("seccomp: %w", errors.ErrUnsupported)
}

// Install is Linux-only.
func (p *Policy) Install() error {
	return fmt.Errorf("seccomp: %w", errors.ErrUnsupported)
}

// InstallProgram is Linux-only.
func InstallProgram(raw []bpf.RawInstruction) error {
	return fmt.Errorf("seccomp: %w", errors.ErrUnsupported)
}
