package sysuser

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func withFiles(t *testing.T, passwd, group string) {
	t.Helper()
	dir := t.TempDir()
	oldP, oldG := PasswdFile, GroupFile
	PasswdFile, GroupFile = filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	if passwd != "" {
		os.WriteFile(PasswdFile, []byte(passwd), 0o644)
	}
	if group != "" {
		os.WriteFile(GroupFile, []byte(group), 0o644)
	}
	Forget()
	t.Cleanup(func() { PasswdFile, GroupFile = oldP, oldG; Forget() })
}

func TestLookup(t *testing.T) {
	withFiles(t, "root:x:0:0:root:/root:/bin/bash\napp:x:1000:1000::/home/app:/bin/sh\n", "root:x:0:\napp:x:1000:\nstaff:x:50:app\n")
	u, err := Lookup("app")
	if err != nil || u.UID != 1000 || u.GID != 1000 || u.Home != "/home/app" || !slices.Equal(u.Groups, []uint32{1000, 50}) {
		t.Errorf("app: %+v, %v", u, err)
	}
	if u, err := Lookup("1000"); err != nil || u.Name != "app" {
		t.Errorf("uid 1000: %+v, %v", u, err)
	}
	if u, err := Lookup("app:staff"); err != nil || u.UID != 1000 || u.GID != 50 || !slices.Equal(u.Groups, []uint32{50}) {
		t.Errorf("app:staff: %+v, %v", u, err)
	}
	if u, err := Lookup("app:7"); err != nil || u.GID != 7 {
		t.Errorf("app:7: %+v, %v", u, err)
	}
	if _, err := Lookup("nobody-here"); !errors.Is(err, ErrUnknownUser) {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := Lookup("app:nogroup"); !errors.Is(err, ErrUnknownUser) {
		t.Errorf("unknown group: %v", err)
	}
}

// Images without /etc/passwd: root and numeric ids still work, as in Docker.
func TestLookupWithoutPasswd(t *testing.T) {
	withFiles(t, "", "")
	if u, err := Lookup("root"); err != nil || u.UID != 0 || u.GID != 0 || u.Home != "/root" {
		t.Errorf("root: %+v, %v", u, err)
	}
	if u, err := Lookup("4242"); err != nil || u.UID != 4242 || u.GID != 0 {
		t.Errorf("4242: %+v, %v", u, err)
	}
	if u, err := Lookup("4242:4242"); err != nil || u.UID != 4242 || u.GID != 4242 {
		t.Errorf("4242:4242: %+v, %v", u, err)
	}
	if _, err := Lookup("user"); !errors.Is(err, ErrUnknownUser) {
		t.Errorf("a name without passwd: %v", err)
	}
}
