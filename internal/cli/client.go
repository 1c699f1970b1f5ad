package cli

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// client returns an SDK client for the daemon chosen by --url, $WARDEN_URL, the default
// socket when it exists and this user may connect to it, or the default TCP address, in
// that order; and authenticated by --api-key, $WARDEN_API_KEY, or the admin key file when
// readable. A URL without a scheme means http (127.0.0.1:7070), or a unix socket when it is
// an absolute path.
func (r *runner) client() (*warden.Client, error) {
	u := withScheme(r.g.url)
	if u == "" {
		u = withScheme(r.env.Getenv(warden.EnvURL))
	}
	if u == "" {
		u = defaultURL
		if _, err := os.Stat(r.env.SocketPath); err == nil {
			if err := dialable(r.env.SocketPath); err == nil {
				u = "unix://" + r.env.SocketPath
			} else {
				hint := ""
				if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
					hint = " (to use it, join its group: sudo usermod -aG " + socketGroup(r.env.SocketPath) + " $USER, then log in again)"
				}
				fmt.Fprintf(r.env.Stderr, "warden: cannot use the daemon's socket %s: %v%s; trying %s\n",
					r.env.SocketPath, unwrapSyscall(err), hint, defaultURL)
			}
		}
	}
	r.baseURL = u

	key, src := r.g.apiKey, "--api-key"
	if key == "" {
		key, src = r.env.Getenv(warden.EnvAPIKey), warden.EnvAPIKey
	}
	if key == "" {
		src = ""
		if k, err := readKeyFile(r.env.AdminKeyFile); err == nil && k != "" {
			key, src = k, r.env.AdminKeyFile
		}
	}
	r.keySource = src

	opts := []warden.Option{
		warden.WithBaseURL(u),
		warden.WithAPIKey(key),
		warden.WithUserAgent("warden-cli/" + version()),
	}
	if r.env.HTTPClient != nil {
		opts = append(opts, warden.WithHTTPClient(r.env.HTTPClient))
	}
	c, err := warden.New(opts...)
	if err != nil {
		return nil, usageErr(r.cmd, "--url: %v", err)
	}
	return c, nil
}

// readKeyFile reads an API key from a file, trimming surrounding white space.
func readKeyFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if len(b) > 4096 {
		return "", fmt.Errorf("%s: too large for an API key", path)
	}
	return string(bytes.TrimSpace(b)), nil
}

// withScheme returns u with a scheme when it has none: unix:// for an absolute path
// (a socket), http:// for anything else (WARDEN_URL=127.0.0.1:7070); and u itself
// otherwise.
func withScheme(u string) string {
	switch {
	case u == "" || strings.Contains(u, "://"):
		return u
	case strings.HasPrefix(u, "/"):
		return "unix://" + u
	}
	return "http://" + u
}

// dialable reports whether this process can connect to the unix socket at path.
func dialable(path string) error {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// unwrapSyscall returns the system call error inside err ("permission denied"), or err.
func unwrapSyscall(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}
