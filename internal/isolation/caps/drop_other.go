//go:build !linux

package caps

import (
	"errors"
	"fmt"
)

// LastCap is Linux-only.
func LastCap() (int, error) { return 0, fmt.Errorf("caps: %w", errors.ErrUnsupported) }

// DropBounding is Linux-only.
func DropBounding() error { return fmt.Errorf("caps: %w", errors.ErrUnsupported) }

// ClearInheritableAmbient is Linux-only.
func ClearInheritableAmbient() error { return fmt.Errorf("caps: %w", errors.ErrUnsupported) }

// DropThread is unsupported off Linux.
func DropThread() error { return fmt.Errorf("caps: %w", errors.ErrUnsupported) }

// DropThreadExcept is unsupported off Linux.
func DropThreadExcept([]int) error { return fmt.Errorf("caps: %w", errors.ErrUnsupported) }
