//go:build !linux

package seccomp

import (
	"errors"
	"fmt"
)

// Apply is Linux-only.
func Apply() error {
	return fmt.Errorf("seccomp: %w", errors.ErrUnsupported)
}

// Install is Linux-only.
func (p *Policy) Install() error {
	return fmt.Errorf("seccomp: %w", errors.ErrUnsupported)
}
