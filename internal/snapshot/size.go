package snapshot

import (
	"io/fs"
	"path/filepath"
	"syscall"
)

// walkSize adds to n the disk blocks (in bytes) of the files under dir,
// each inode once.
func walkSize(dir string, n *int64) error {
	seen := map[uint64]bool{}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
			*n += st.Blocks * 512
		}
		return nil
	})
}
