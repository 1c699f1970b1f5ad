package int80

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Syscall makes the i386 system call nr with up to three arguments through
// int $0x80 and returns the raw eax value (a negative errno on failure).
// Pointer arguments must point below 4 GiB (see Alloc32).
func Syscall(nr, a1, a2, a3 uint32) int32

// i386 syscall numbers used by the tests.
const (
	SysGetpid = 20
	SysMkdir  = 39
	SysSetuid = 23
)

// Alloc32 maps n bytes below 2 GiB (MAP_32BIT), addressable by i386 calls.
func Alloc32(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_32BIT)
	if err != nil {
		return nil, fmt.Errorf("int80: mmap MAP_32BIT: %w", err)
	}
	return b, nil
}
