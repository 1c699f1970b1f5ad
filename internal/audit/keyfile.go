package audit

import (
	"fmt"

	"github.com/warden-sandbox/warden/internal/safefile"
)

// LoadOrCreateKey returns the HMAC key stored in the file at path, creating
// the file (mode 0600, directory 0700) with a new random key on first use.
//
// The key must live outside the database, in a file only the daemon's user
// (root) can read: whoever can read it can forge a chain that verifies.
// The file holds the key in hex on one line. A key file that group or
// others can access, that belongs to another user, or that does not hold
// exactly KeySize bytes is refused (safefile.LoadOrCreateKey).
func LoadOrCreateKey(path string) ([]byte, error) {
	key, err := safefile.LoadOrCreateKey(path, KeySize)
	if err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	return key, nil
}
