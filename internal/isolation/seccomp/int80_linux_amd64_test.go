package seccomp

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/warden-sandbox/warden/internal/isolation/seccomp/internal/int80"
	"golang.org/x/sys/unix"
)

func int80Result(r int32) probeResult {
	if r < 0 {
		return resultOf(unix.Errno(-r))
	}
	return probeResult{OK: true}
}

// int80Probes makes i386 system calls from this 64-bit process. It runs in a
// child process of its own: with ia32 emulation disabled at boot the kernel
// answers int $0x80 with SIGSEGV.
func int80Probes(dir, tag string) map[string]probeResult {
	out := map[string]probeResult{}
	out["getpid"] = int80Result(int80.Syscall(int80.SysGetpid, 0, 0, 0))
	buf, err := int80.Alloc32(4096)
	if err != nil {
		out["mkdir"] = resultOf(err)
		return out
	}
	path := filepath.Join(dir, "int80-"+tag)
	copy(buf, path+"\x00")
	addr := uint32(uintptr(unsafe.Pointer(&buf[0])))
	out["mkdir"] = int80Result(int80.Syscall(int80.SysMkdir, addr, 0o755, 0))
	return out
}

// checkInt80 requires that i386 calls never succeed under the filter.
func checkInt80(t *testing.T, base, filt helperReport, baseDir, filtDir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(filtDir, "int80-filtered")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("i386 mkdir under the filter created the directory (stat: %v)", err)
	}
	if _, err := os.Stat(filepath.Join(baseDir, "int80-baseline")); base.Int80["mkdir"].OK && err != nil {
		t.Errorf("i386 mkdir without the filter reported success but left no directory: %v", err)
	}
	if child, ok := filt.Int80["child"]; ok {
		// The child died (SIGSEGV without ia32 emulation): nothing succeeded.
		t.Logf("int80 child under the filter: %s", child.Detail)
		return
	}
	for _, name := range []string{"getpid", "mkdir"} {
		got := filt.Int80[name]
		if got.OK {
			t.Errorf("i386 %s via int $0x80 succeeded under the filter", name)
		} else if got.Errno != "EPERM" {
			t.Errorf("i386 %s via int $0x80 under the filter: %v, want EPERM", name, got)
		}
		t.Logf("i386 %-6s filtered: %v baseline: %v", name, got, base.Int80[name])
	}
	if !base.Int80["getpid"].OK {
		t.Logf("NOTE: i386 getpid fails without the filter too (%v): ia32 emulation seems off", base.Int80["getpid"])
	}
}
