package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
)

// socketAccess gives the API's unix socket to group: mode 0660 and
// owner root:group, so that users in the group can use the CLI without
// root (they still need an API key). A missing group is created as a
// system group (groupadd --system). Without a group, or when it cannot be
// had, the socket stays root-only (0600) and the reason is logged.
func socketAccess(path, group string, log *slog.Logger) error {
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if group == "" {
		return nil
	}
	gid, created, err := ensureGroup(group)
	if err != nil {
		log.Warn("the API socket stays root-only", "socket", path, "group", group, "err", err)
		return nil
	}
	if created {
		log.Info("created the group whose members may use the API socket", "group", group, "gid", gid,
			"add a user", "sudo usermod -aG "+group+" USER (then log in again)")
	}
	if err := os.Chown(path, 0, gid); err != nil {
		return fmt.Errorf("chown %s to group %s: %w", path, group, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	return nil
}

// ensureGroup returns group's gid, creating it as a system group when it
// does not exist.
func ensureGroup(group string) (gid int, created bool, err error) {
	lookup := func() (int, error) {
		g, err := user.LookupGroup(group)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(g.Gid)
	}
	gid, err = lookup()
	if err == nil {
		return gid, false, nil
	}
	var unknown user.UnknownGroupError
	if !errors.As(err, &unknown) {
		return 0, false, fmt.Errorf("look up group %s: %w", group, err)
	}
	if out, err := exec.Command("groupadd", "--system", group).CombinedOutput(); err != nil {
		return 0, false, fmt.Errorf("create group %s: groupadd: %w: %s", group, err, strings.TrimSpace(string(out)))
	}
	if gid, err = lookup(); err != nil {
		return 0, false, fmt.Errorf("look up group %s after creating it: %w", group, err)
	}
	return gid, true, nil
}
