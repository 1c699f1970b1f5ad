package cli

import (
	"bytes"
	"fmt"
	"os"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// client returns an SDK client for the daemon chosen by --url, $WARDEN_URL, the default
// socket when it exists, or the default TCP address, in that order; and authenticated by
// --api-key, $WARDEN_API_KEY, or the admin key file when readable.
func (r *runner) client() (*warden.Client, error) {
	u := r.g.url
	if u == "" {
		u = r.env.Getenv(warden.EnvURL)
	}
	if u == "" {
		if _, err := os.Stat(r.env.SocketPath); err == nil {
			u = "unix://" + r.env.SocketPath
		} else {
			u = defaultURL
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
