//go:build !linux

package landlock

import (
	"errors"
	"fmt"
)

// ExecRestricted is Linux-only.
func ExecRestricted(rootfs, path string, argv, env []string) error {
	return fmt.Errorf("landlock: %w", errors.ErrUnsupported)
}

// RestrictThread is Linux-only.
func RestrictThread(rootfs string) error {
	return fmt.Errorf("landlock: %w", errors.ErrUnsupported)
}
