package caps

import (
	"fmt"
	"strings"
)

// names maps capability names (without the CAP_ prefix, lower case) to
// numbers, as in linux/capability.h.
var names = map[string]int{
	"chown": 0, "dac_override": 1, "dac_read_search": 2, "fowner": 3, "fsetid": 4,
	"kill": 5, "setgid": 6, "setuid": 7, "setpcap": 8, "linux_immutable": 9,
	"net_bind_service": 10, "net_broadcast": 11, "net_admin": 12, "net_raw": 13,
	"ipc_lock": 14, "ipc_owner": 15, "sys_module": 16, "sys_rawio": 17, "sys_chroot": 18,
	"sys_ptrace": 19, "sys_pacct": 20, "sys_admin": 21, "sys_boot": 22, "sys_nice": 23,
	"sys_resource": 24, "sys_time": 25, "sys_tty_config": 26, "mknod": 27, "lease": 28,
	"audit_write": 29, "audit_control": 30, "setfcap": 31, "mac_override": 32,
	"mac_admin": 33, "syslog": 34, "wake_alarm": 35, "block_suspend": 36, "audit_read": 37,
	"perfmon": 38, "bpf": 39, "checkpoint_restore": 40,
}

// ByName returns the numbers of the named capabilities ("CAP_CHOWN" or
// "chown"), or an error naming the first unknown one.
func ByName(list []string) ([]int, error) {
	out := make([]int, 0, len(list))
	for _, n := range list {
		c, ok := names[strings.TrimPrefix(strings.ToLower(n), "cap_")]
		if !ok {
			return nil, fmt.Errorf("caps: unknown capability %q", n)
		}
		out = append(out, c)
	}
	return out, nil
}
