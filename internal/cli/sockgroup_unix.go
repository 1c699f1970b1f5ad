//go:build unix

package cli

import (
	"os/user"
	"strconv"
	"syscall"
)

// socketGroup names the group that owns the socket at path ("warden", the daemon's
// default, when it cannot be read).
func socketGroup(path string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err == nil && st.Gid != 0 {
		if g, err := user.LookupGroupId(strconv.FormatUint(uint64(st.Gid), 10)); err == nil {
			return g.Name
		}
	}
	return "warden"
}
