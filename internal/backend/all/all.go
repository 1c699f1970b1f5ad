// Package all links every backend this build of wardend ships: each
// backend package registers itself with package backend from init, and the
// daemon builds what is registered. Adding a backend is its package plus
// one import line here (see "Adding a backend" in docs/architecture.md).
package all

import (
	_ "github.com/warden-sandbox/warden/internal/backend/gvisor" // gVisor (runsc)
	_ "github.com/warden-sandbox/warden/internal/backend/native" // namespaces, cgroups, seccomp, Landlock
)
