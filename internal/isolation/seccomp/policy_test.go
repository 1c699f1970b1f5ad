package seccomp

import (
	"bytes"
	"encoding/binary"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

var update = flag.Bool("update", false, "rewrite testdata/filter.golden from the current policy")

const goldenPath = "testdata/filter.golden"

func requireAMD64(t *testing.T) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skipf("SKIP: the policy is x86_64-only and go-seccomp-bpf assembles for the running arch (%s)", runtime.GOARCH)
	}
}

func mustLoad(t *testing.T) *Policy {
	t.Helper()
	p, err := Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return p
}

// TestGolden pins the assembled program, so every policy or library change
// shows up as a diff in review. Regenerate with -update.
func TestGolden(t *testing.T) {
	requireAMD64(t)
	var buf bytes.Buffer
	if err := mustLoad(t).Render(&buf); err != nil {
		t.Fatalf("Render: %v", err)
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(goldenPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenPath, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", goldenPath)
		return
	}
	want, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if bytes.Equal(buf.Bytes(), want) {
		return
	}
	got, exp := strings.Split(buf.String(), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(got), len(exp)) {
		var g, e string
		if i < len(got) {
			g = got[i]
		}
		if i < len(exp) {
			e = exp[i]
		}
		if g != e {
			t.Fatalf("assembled filter differs from %s at line %d:\n got: %s\nwant: %s\n(review the change, then run go test -run Golden -update)", goldenPath, i+1, g, e)
		}
	}
}

// vmRun runs the filter in x/net/bpf's VM. That VM loads 32-bit words
// big-endian, so each word of struct seccomp_data is written big-endian at
// the offset the kernel would read it from (args are little-endian u64s: the
// low word comes first).
func vmRun(t *testing.T, vm *bpf.VM, archID, nr uint32, args [6]uint64) Action {
	t.Helper()
	in := make([]byte, 64)
	binary.BigEndian.PutUint32(in[offNr:], nr)
	binary.BigEndian.PutUint32(in[offArch:], archID)
	for i, a := range args {
		binary.BigEndian.PutUint32(in[offArgs+8*i:], uint32(a))
		binary.BigEndian.PutUint32(in[offArgs+8*i+4:], uint32(a>>32))
	}
	ret, err := vm.Run(in)
	if err != nil {
		t.Fatalf("vm: %v", err)
	}
	return Action(uint32(ret))
}

func newVM(t *testing.T, p *Policy) *bpf.VM {
	t.Helper()
	prog, err := p.Instructions()
	if err != nil {
		t.Fatalf("Instructions: %v", err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("NewVM: %v", err)
	}
	return vm
}

// argCases returns interesting argument vectors for a syscall.
func argCases(rng *rand.Rand, name string) [][6]uint64 {
	cases := [][6]uint64{{}, {^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}}
	for range 4 {
		var a [6]uint64
		for i := range a {
			a[i] = rng.Uint64()
		}
		cases = append(cases, a)
	}
	hiBits := []uint64{0, 1 << 32, 0xffffffff00000000}
	switch name {
	case "ioctl":
		for _, req := range []uint64{0x5401, 0x5412, 0x541c, 0x5413, 0x540e, 0x5410, 0x5412 | 0x10000, 0x541c &^ 4, 0xffffffff} {
			for _, hi := range hiBits {
				cases = append(cases, [6]uint64{0, req | hi, 0})
			}
		}
	case "socket":
		for domain := uint64(0); domain <= 46; domain++ {
			for typ := uint64(0); typ <= 15; typ++ {
				for _, flags := range []uint64{0, 0x800, 0x80000, 0x80800} {
					for _, proto := range []uint64{0, 1, 6, 9, 17, 58, 132, 255, 262, 768} {
						cases = append(cases, [6]uint64{domain, typ | flags, proto})
					}
				}
			}
			cases = append(cases, [6]uint64{domain | 1<<32, 1, 0}, [6]uint64{domain, 1 | 1<<32, 0})
		}
	case "clone":
		for bit := range 64 {
			cases = append(cases, [6]uint64{1 << bit}, [6]uint64{0x1200011 | 1<<bit})
		}
		cases = append(cases, [6]uint64{0x3d0f00}, [6]uint64{0x1200011}, [6]uint64{0x4111})
	case "personality":
		for _, v := range []uint64{0, 8, 0x20000, 0x20008, 0xffffffff, 0x40000, 0x400000, 0x0040008, 1, ^uint64(0), 0x100000000} {
			cases = append(cases, [6]uint64{v})
		}
	}
	return cases
}

// TestFilterMatchesPolicy checks the assembled BPF against the policy's
// reference semantics (Policy.Evaluate) for every syscall number, x32 and
// foreign-arch numbers, and argument vectors aimed at each conditional rule.
func TestFilterMatchesPolicy(t *testing.T) {
	requireAMD64(t)
	p := mustLoad(t)
	vm := newVM(t, p)
	rng := rand.New(rand.NewPCG(1, 2))
	checked := 0
	for nr := uint32(0); nr < 600; nr++ {
		name := arch.X86_64.SyscallNumbers[int(nr)]
		for _, args := range argCases(rng, name) {
			got, want := vmRun(t, vm, auditArchX86_64, nr, args), p.Evaluate(nr, args)
			if got != want {
				t.Fatalf("%s (nr %d) args %#x: filter says %v, policy says %v", name, nr, args, got, want)
			}
			checked++
		}
		// Foreign architectures never reach the rules.
		for _, foreign := range []uint32{0x40000003 /* i386 */, 0xc00000b7 /* aarch64 */, 0} {
			if got := vmRun(t, vm, foreign, nr, [6]uint64{}); got != p.ForeignArchAction {
				t.Fatalf("arch %#x nr %d: got %v, want %v", foreign, nr, got, p.ForeignArchAction)
			}
		}
	}
	for _, nr := range []uint32{x32SyscallBit, x32SyscallBit | 39, x32SyscallBit | 56, x32SyscallBit | 512, 0x7fffffff, 0xffffffff} {
		if got := vmRun(t, vm, auditArchX86_64, nr, [6]uint64{}); got != p.X32Action {
			t.Fatalf("nr %#x: got %v, want x32 action %v", nr, got, p.X32Action)
		}
	}
	t.Logf("%d native (nr, args) cases agree", checked)
}

// TestRequiredDenials states isolation.md's and the probes' requirements
// independently of policy.json, so the policy cannot drift past them.
func TestRequiredDenials(t *testing.T) {
	requireAMD64(t)
	p := mustLoad(t)
	vm := newVM(t, p)
	eperm, enosys := Action(retErrno|1), Action(retErrno|38)
	denied := strings.Fields(`ptrace process_vm_readv process_vm_writev unshare setns mount umount2
		fsopen fsconfig fsmount fspick open_tree open_tree_attr move_mount mount_setattr pivot_root chroot
		keyctl add_key request_key bpf userfaultfd perf_event_open io_uring_setup io_uring_enter
		io_uring_register kexec_load kexec_file_load init_module finit_module delete_module reboot swapon
		swapoff syslog settimeofday clock_settime clock_adjtime adjtimex acct quotactl open_by_handle_at
		name_to_handle_at kcmp pidfd_getfd fanotify_init lookup_dcookie vhangup iopl ioperm`)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, name := range denied {
		nr, ok := arch.X86_64.SyscallNames[name]
		if !ok {
			t.Fatalf("unknown syscall %s", name)
		}
		for _, args := range argCases(rng, name) {
			if got := vmRun(t, vm, auditArchX86_64, uint32(nr), args); got != eperm {
				t.Errorf("%s%#x: got %v, want EPERM", name, args, got)
			}
		}
	}

	nr := func(name string) uint32 { return uint32(arch.X86_64.SyscallNames[name]) }
	cases := []struct {
		what string
		nr   uint32
		args [6]uint64
		want Action
	}{
		{"clone3", nr("clone3"), [6]uint64{}, enosys},
		{"clone CLONE_NEWUSER", nr("clone"), [6]uint64{0x10000000 | 17}, eperm},
		{"clone CLONE_NEWNS|fork flags", nr("clone"), [6]uint64{0x20000 | 0x1200011}, eperm},
		{"clone CLONE_NEWNET|CLONE_VFORK|CLONE_VM", nr("clone"), [6]uint64{0x40000000 | 0x4100 | 17}, eperm},
		{"clone thread", nr("clone"), [6]uint64{0x3d0f00}, retAllow},
		{"clone fork (glibc)", nr("clone"), [6]uint64{0x1200011}, retAllow},
		{"clone vfork+pidfd (Go os/exec)", nr("clone"), [6]uint64{0x4000 | 0x100 | 0x1000 | 17}, retAllow},
		{"ioctl TIOCSTI", nr("ioctl"), [6]uint64{0, 0x5412}, eperm},
		{"ioctl TIOCSTI high bits", nr("ioctl"), [6]uint64{0, 0xdead00005412}, eperm},
		{"ioctl TIOCLINUX", nr("ioctl"), [6]uint64{0, 0x541c}, eperm},
		{"ioctl TIOCLINUX high bits", nr("ioctl"), [6]uint64{0, 1<<63 | 0x541c}, eperm},
		{"ioctl TCGETS", nr("ioctl"), [6]uint64{0, 0x5401}, retAllow},
		{"ioctl TIOCSCTTY", nr("ioctl"), [6]uint64{0, 0x540e}, retAllow},
		{"socket AF_PACKET SOCK_RAW", nr("socket"), [6]uint64{17, 3, 0x300}, eperm},
		{"socket AF_PACKET SOCK_DGRAM", nr("socket"), [6]uint64{17, 2, 0}, eperm},
		{"socket AF_INET SOCK_RAW", nr("socket"), [6]uint64{2, 3, 1}, eperm},
		{"socket AF_INET SOCK_RAW|SOCK_CLOEXEC", nr("socket"), [6]uint64{2, 3 | 0x80000, 255}, eperm},
		{"socket AF_INET6 SOCK_RAW", nr("socket"), [6]uint64{10, 3, 58}, eperm},
		{"socket AF_INET SOCK_PACKET", nr("socket"), [6]uint64{2, 10, 0x300}, eperm},
		{"socket AF_UNIX SOCK_RAW", nr("socket"), [6]uint64{1, 3, 0}, eperm},
		// Refused as by a kernel without audit, so shadow's tools carry on.
		{"socket AF_NETLINK NETLINK_AUDIT", nr("socket"), [6]uint64{16, 3, 9}, Action(retErrno | 93)},
		{"socket AF_NETLINK SOCK_DGRAM NETLINK_AUDIT", nr("socket"), [6]uint64{16, 2 | 0x80000, 9}, Action(retErrno | 93)},
		{"socket AF_INET SCTP", nr("socket"), [6]uint64{2, 1, 132}, eperm},
		{"socket AF_VSOCK", nr("socket"), [6]uint64{40, 1, 0}, eperm},
		{"socket AF_ALG", nr("socket"), [6]uint64{38, 5, 0}, eperm},
		{"socket AF_INET high bits", nr("socket"), [6]uint64{2 | 1<<32, 1, 0}, eperm},
		{"socket AF_UNIX SOCK_STREAM|SOCK_CLOEXEC", nr("socket"), [6]uint64{1, 1 | 0x80000, 0}, retAllow},
		{"socket AF_INET SOCK_STREAM|SOCK_NONBLOCK|SOCK_CLOEXEC", nr("socket"), [6]uint64{2, 1 | 0x80800, 0}, retAllow},
		{"socket AF_INET6 SOCK_STREAM MPTCP", nr("socket"), [6]uint64{10, 1 | 0x80800, 262}, retAllow},
		{"socket AF_INET SOCK_DGRAM ICMP (ping)", nr("socket"), [6]uint64{2, 2, 1}, retAllow},
		{"socket AF_NETLINK SOCK_RAW NETLINK_ROUTE", nr("socket"), [6]uint64{16, 3 | 0x80000, 0}, retAllow},
		{"personality(0)", nr("personality"), [6]uint64{0}, retAllow},
		{"personality(query)", nr("personality"), [6]uint64{0xffffffff}, retAllow},
		{"personality(ADDR_NO_RANDOMIZE)", nr("personality"), [6]uint64{0x0040000}, eperm},
		{"execve", nr("execve"), [6]uint64{}, retAllow},
		{"modify_ldt", nr("modify_ldt"), [6]uint64{}, eperm},
		{"file_getattr (nr 468, newer than the policy)", 468, [6]uint64{}, enosys},
		{"x32 getpid", x32SyscallBit | 39, [6]uint64{}, enosys},
	}
	for _, c := range cases {
		if got := vmRun(t, vm, auditArchX86_64, c.nr, c.args); got != c.want {
			t.Errorf("%s: got %v, want %v", c.what, got, c.want)
		}
	}
	if got := vmRun(t, vm, 0x40000003, 20 /* i386 getpid */, [6]uint64{}); got.allows() {
		t.Errorf("i386 getpid: foreign arch allowed (%v)", got)
	}
}

func TestParseRejects(t *testing.T) {
	base := `{"arch":"x86_64","default_action":"errno:EPERM","foreign_arch_action":"errno:EPERM",
		"x32_action":"errno:ENOSYS","known_max_syscall":467,"unknown_syscall_action":"errno:ENOSYS",
		"never_allow":["ptrace"],"rules":[%s]}`
	ok := `{"action":"allow","names":["read"]}`
	if _, err := Parse([]byte(strings.Replace(base, "%s", ok, 1))); err != nil {
		t.Fatalf("minimal policy rejected: %v", err)
	}
	for name, c := range map[string]struct{ policy, rules string }{
		"never_allow violated":     {base, `{"action":"allow","names":["read","ptrace"]}`},
		"never_allow conditional":  {base, `{"action":"allow","syscall":"ptrace","any_of":[{"args":[{"arg":0,"op":"eq","value":0}]}]}`},
		"shadowed rule":            {base, `{"action":"allow","names":["read"]},{"action":"errno:EPERM","syscall":"read","any_of":[{"args":[{"arg":0,"op":"eq","value":0}]}]}`},
		"unknown syscall":          {base, `{"action":"allow","names":["frobnicate"]}`},
		"unknown symbol":           {base, `{"action":"allow","syscall":"socket","any_of":[{"args":[{"arg":0,"op":"eq","value":"AF_FOO"}]}]}`},
		"value outside mask":       {base, `{"action":"allow","syscall":"socket","any_of":[{"args":[{"arg":1,"op":"masked_eq","mask":"0xf","value":"0x10"}]}]}`},
		"zero mask":                {base, `{"action":"allow","syscall":"socket","any_of":[{"args":[{"arg":1,"op":"masked_eq","mask":0,"value":0}]}]}`},
		"bad arg index":            {base, `{"action":"allow","syscall":"socket","any_of":[{"args":[{"arg":6,"op":"eq","value":0}]}]}`},
		"unknown op":               {base, `{"action":"allow","syscall":"socket","any_of":[{"args":[{"arg":0,"op":"ne","value":0}]}]}`},
		"value and values":         {base, `{"action":"allow","syscall":"socket","any_of":[{"args":[{"arg":0,"op":"eq","value":0,"values":[1]}]}]}`},
		"conditional without sets": {base, `{"action":"allow","syscall":"socket"}`},
		"names and syscall":        {base, `{"action":"allow","names":["read"],"syscall":"socket","any_of":[{"args":[{"arg":0,"op":"eq","value":0}]}]}`},
		"unknown action":           {base, `{"action":"trace","names":["read"]}`},
		"unknown field":            {base, `{"action":"allow","names":["read"],"nmaes":["write"]}`},
		"default allow":            {strings.Replace(base, `"default_action":"errno:EPERM"`, `"default_action":"allow"`, 1), ok},
		"foreign arch allow":       {strings.Replace(base, `"foreign_arch_action":"errno:EPERM"`, `"foreign_arch_action":"log"`, 1), ok},
		"above known max":          {strings.Replace(base, `"known_max_syscall":467`, `"known_max_syscall":400`, 1), `{"action":"allow","names":["clone3"]}`},
		"other arch":               {strings.Replace(base, `"x86_64"`, `"aarch64"`, 1), ok},
	} {
		if _, err := Parse([]byte(strings.Replace(c.policy, "%s", c.rules, 1))); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
