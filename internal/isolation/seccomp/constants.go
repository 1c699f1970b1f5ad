package seccomp

// symbols are the names policy.json may use for argument values. They are
// spelled out here, rather than taken from x/sys/unix, so that the policy means
// the same thing on every build host.
var symbols = map[string]uint64{
	"U32_MASK": 0xffffffff, // the kernel reads the argument as a 32-bit int

	// ioctl requests (asm-generic/ioctls.h).
	"TIOCSTI":   0x5412,
	"TIOCLINUX": 0x541c,

	// Namespace flags accepted by clone(2) (linux/sched.h).
	"CLONE_NEWNS":     0x00020000,
	"CLONE_NEWCGROUP": 0x02000000,
	"CLONE_NEWUTS":    0x04000000,
	"CLONE_NEWIPC":    0x08000000,
	"CLONE_NEWUSER":   0x10000000,
	"CLONE_NEWPID":    0x20000000,
	"CLONE_NEWNET":    0x40000000,

	// Address families (linux/socket.h).
	"AF_UNIX":    1,
	"AF_INET":    2,
	"AF_INET6":   10,
	"AF_NETLINK": 16,
	"AF_PACKET":  17,

	// Socket types (linux/net.h); the type argument also carries
	// SOCK_NONBLOCK and SOCK_CLOEXEC above SOCK_TYPE_MASK.
	"SOCK_TYPE_MASK": 0xf,
	"SOCK_STREAM":    1,
	"SOCK_DGRAM":     2,
	"SOCK_RAW":       3,
	"SOCK_SEQPACKET": 5,
	"SOCK_PACKET":    10,

	// Protocols (linux/in.h, linux/netlink.h).
	"IPPROTO_IP":     0,
	"IPPROTO_ICMP":   1,
	"IPPROTO_TCP":    6,
	"IPPROTO_UDP":    17,
	"IPPROTO_ICMPV6": 58,
	"IPPROTO_MPTCP":  262,
	"NETLINK_ROUTE":  0,
	"NETLINK_AUDIT":  9,

	// personality(2) values (linux/personality.h).
	"PER_LINUX":         0,
	"PER_LINUX32":       0x0008,
	"UNAME26":           0x0020000,
	"PERSONALITY_QUERY": 0xffffffff,
}

// Seccomp return values (linux/seccomp.h) and errno values used by actions.
const (
	retKillProcess = 0x80000000
	retErrno       = 0x00050000
	retLog         = 0x7ffc0000
	retAllow       = 0x7fff0000
	retDataMask    = 0x0000ffff

	// retSentinel marks "no rule in this segment matched" in the per-rule
	// programs that go-seccomp-bpf assembles (SECCOMP_RET_TRACE). It never
	// reaches the final program; see link.
	retSentinel = 0x7ff00000

	auditArchX86_64 = 0xc000003e
	x32SyscallBit   = 0x40000000

	// Offsets into struct seccomp_data.
	offNr   = 0
	offArch = 4
	offArgs = 16
)

var errnoNames = map[string]uint32{
	"EPERM":  1,
	"ENOENT": 2,
	"EACCES": 13,
	"EINVAL": 22,
	"ENOSYS": 38,
	// Answers that make programs carry on without a feature.
	"EPROTONOSUPPORT": 93,
}
