// Package seccomp holds Warden's in-sandbox syscall policy and installs it.
//
// The policy is data: policy.json, embedded at build time and reviewed like
// code. It is Docker's default profile (github.com/moby/profiles/seccomp)
// tightened per shared/design/isolation.md section 5: an allowlist whose
// default action is EPERM, with argument filters for ioctl, clone, socket and
// personality, clone3 answered with ENOSYS, and an explicit never_allow list
// that Load checks against every allow rule.
//
// The BPF program is generated per rule by github.com/elastic/go-seccomp-bpf
// and linked by this package. Rules are assembled one at a time because
// go-seccomp-bpf v1.6.0 does not reload the syscall number after comparing
// arguments: in a single multi-rule program, a failed argument check leaves an
// argument in the accumulator, and later rules then compare that argument
// against syscall numbers (socket(AF_PACKET=17, ...) would match pread64, nr
// 17, and be allowed). Here every rule ends by reloading the syscall number,
// and the package writes its own prologue: foreign architectures (i386 through
// int $0x80) get foreign_arch_action, x32 gets x32_action, and syscall numbers
// above known_max_syscall (newer than the policy) get unknown_syscall_action,
// so that libc falls back instead of seeing EPERM.
//
// testdata/filter.golden is a rendering of the assembled program; run
// `go test ./internal/isolation/seccomp -run Golden -update` after changing
// the policy and review the diff.
//
// Apply sets no_new_privs and installs the filter with
// SECCOMP_FILTER_FLAG_TSYNC, so every thread of the calling process is
// filtered, and every process it later forks and execs inherits the filter.
package seccomp
