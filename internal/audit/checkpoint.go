package audit

import (
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/warden-sandbox/warden/internal/safefile"
)

// checkpoint is the head of the chain as last written by the Logger, kept
// in a root-only file outside the database. Deleting the newest rows from
// the database leaves the checkpoint pointing past the end of the log,
// which Verify reports as missing events.
type checkpoint struct {
	Version int    `json:"version"`
	Seq     int64  `json:"seq"`
	Hash    string `json:"hash"`
	MAC     string `json:"mac"` // HMAC of (seq, hash), see checkpointMAC
}

const checkpointVersion = 1

// readCheckpoint loads and authenticates the checkpoint at path. ok is
// false when the file does not exist.
func readCheckpoint(path string, key []byte) (cp checkpoint, ok bool, err error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return checkpoint{}, false, nil
	}
	if err != nil {
		return checkpoint{}, false, fmt.Errorf("audit checkpoint: %w", err)
	}
	if err := safefile.CheckPrivate(path, fi); err != nil {
		return checkpoint{}, false, fmt.Errorf("audit checkpoint: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return checkpoint{}, false, fmt.Errorf("audit checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		return checkpoint{}, false, fmt.Errorf("audit checkpoint %s: %w", path, err)
	}
	if cp.Version != checkpointVersion {
		return checkpoint{}, false, fmt.Errorf("audit checkpoint %s: version %d, want %d", path, cp.Version, checkpointVersion)
	}
	mac, err := hex.DecodeString(cp.MAC)
	if err != nil || !hmac.Equal(mac, checkpointMAC(key, cp.Seq, cp.Hash)) {
		return checkpoint{}, false, fmt.Errorf("audit checkpoint %s: bad mac: the file was altered or written with another key", path)
	}
	return cp, true, nil
}

// writeCheckpoint replaces the checkpoint at path atomically: it writes a
// temporary file in the same directory and renames it over the old one, so
// a reader sees either the old or the new checkpoint, never a mix. With
// sync it also fsyncs the file and the directory.
func writeCheckpoint(path string, key []byte, seq int64, hash string, sync bool) error {
	cp := checkpoint{Version: checkpointVersion, Seq: seq, Hash: hash, MAC: hex.EncodeToString(checkpointMAC(key, seq, hash))}
	b, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("audit checkpoint: %w", err)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*") // mode 0600
	if err != nil {
		return fmt.Errorf("audit checkpoint: %w", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if err == nil && sync {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("audit checkpoint: %w", err)
	}
	if sync {
		if d, err := os.Open(dir); err == nil {
			err = d.Sync()
			d.Close()
			if err != nil {
				return fmt.Errorf("audit checkpoint: sync dir: %w", err)
			}
		}
	}
	return nil
}
