package secrets

import (
	"fmt"

	"github.com/warden-sandbox/warden/internal/safefile"
)

// KeySize is the size of the key that encrypts secret values at rest
// (AES-256).
const KeySize = 32

// LoadOrCreateKey returns the encryption key stored in hex in the file at
// path, creating the file (mode 0600, its directory 0700) with a fresh random
// key on first use.
//
// Whoever reads the file can decrypt every secret, so it must live outside
// the data file, readable by the daemon's user only. A key file that group
// or others can access, that belongs to another user, that is not a regular
// file or that does not hold exactly KeySize bytes is refused.
func LoadOrCreateKey(path string) ([]byte, error) {
	key, err := safefile.LoadOrCreateKey(path, KeySize)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return key, nil
}
