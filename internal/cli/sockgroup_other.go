//go:build !unix

package cli

// socketGroup names the daemon's default socket group (wardend runs on Linux only).
func socketGroup(string) string { return "warden" }
