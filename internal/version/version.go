// Package version holds the version of Warden's binaries, set at build time
// with -ldflags "-X github.com/warden-sandbox/warden/internal/version.Version=...".
package version

// Version is the release version; "dev" in development builds.
var Version = "dev"
