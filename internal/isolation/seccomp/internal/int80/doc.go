// Package int80 makes i386 system calls (int $0x80) from 64-bit code, so tests
// can check that the seccomp filter refuses the foreign architecture.
package int80
