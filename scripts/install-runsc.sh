#!/usr/bin/env bash
# Installs gVisor's runsc, which the gvisor backend drives, at the version
# Warden is tested with, plus Warden's small fixes to it.
#
# gVisor publishes no tagged Go releases: runsc is built from the module
# proxy's pseudo-version of gVisor's "go" branch. Only a CGO_ENABLED=0 build
# works (a cgo build dies at start with "fork/exec /proc/self/exe"). The
# source is copied out of the module cache into a throwaway directory, the
# patches in scripts/runsc-patches/ are applied (each explains the gVisor bug
# it fixes), and runsc is built there: Warden's go.mod never sees gVisor's
# dependency tree.
#
# Then the sentry's seccomp programs for the options Warden uses are
# precompiled into the binary (scripts/runsc-precompile): a Go build of
# gVisor has none and builds the filter at every sandbox start and restore
# (about 50 ms here), where gVisor's own Bazel builds precompile them.
#
# The version runsc reports is RUNSC_VERSION+warden-<digest of the patches and the precompiler>;
# the gvisor backend's preflight insists on the "+warden" mark. Idempotent:
# does nothing when `runsc --version` already reports that exact version.
# Override with RUNSC_VERSION=... and RUNSC_PREFIX=... (default
# /usr/local/bin). Needs Go, git (or patch), and the Go module proxy.
# With --check it only reports, by its exit status, whether that version is
# installed (0) or not (1).
set -euo pipefail

RUNSC_VERSION=${RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}
RUNSC_PREFIX=${RUNSC_PREFIX:-/usr/local/bin}
patches=$(cd "$(dirname "$0")/runsc-patches" && pwd)
precompile=$(cd "$(dirname "$0")/runsc-precompile" && pwd)
bin="$RUNSC_PREFIX/runsc"
digest=$(cat "$patches"/*.patch "$precompile"/*.go | sha256sum | cut -c1-12)
version="$RUNSC_VERSION+warden-$digest"

# The first line of `runsc --version`, read whole: a pipe into head or grep -q
# can end runsc with SIGPIPE, which pipefail turns into a failure.
first_line() { local out; out=$("$1" --version 2>/dev/null) || return 1; printf '%s\n' "${out%%$'\n'*}"; }

if [ -x "$bin" ] && [ "$(first_line "$bin")" = "runsc version $version" ]; then
  exit 0
fi
[ "${1:-}" = --check ] && exit 1
command -v go >/dev/null 2>&1 || { echo "install-runsc: go is not on PATH" >&2; exit 1; }
if command -v git >/dev/null 2>&1; then
  apply() { (cd "$1" && git apply -p1 "$2"); }
elif command -v patch >/dev/null 2>&1; then
  apply() { patch -d "$1" -p1 --quiet --forward < "$2"; }
else
  echo "install-runsc: neither git nor patch is on PATH" >&2
  exit 1
fi

echo "install-runsc: building gvisor.dev/gvisor/runsc@$RUNSC_VERSION with $(ls "$patches" | wc -l) patches (CGO_ENABLED=0) into $bin" >&2
start=$(date +%s)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
# Outside any module, so that Warden's go.mod is neither read nor changed.
src=$(cd "$work" && go mod download -json "gvisor.dev/gvisor@$RUNSC_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
if [ -z "$src" ] || [ ! -d "$src" ]; then
  echo "install-runsc: could not download gvisor.dev/gvisor@$RUNSC_VERSION" >&2
  exit 1
fi
cp -r "$src" "$work/gvisor"
chmod -R u+w "$work/gvisor"
for p in "$patches"/*.patch; do
  apply "$work/gvisor" "$p"
done
# The precompiler's files carry "//go:build ignore" (two lines) so that
# Warden's own builds skip them.
tail -n +3 "$precompile/config_warden.go" > "$work/gvisor/runsc/boot/filter/config/config_warden.go"
mkdir -p "$work/gvisor/tools/wardenprecompile"
tail -n +3 "$precompile/main.go" > "$work/gvisor/tools/wardenprecompile/main.go"
(
  cd "$work/gvisor"
  go run ./tools/wardenprecompile > "$work/filter_precompiled.go"
  mv "$work/filter_precompiled.go" runsc/boot/filter/filter_precompiled.go
  gofmt -w runsc/boot/filter/filter_precompiled.go
  go build -trimpath -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$version" -o "$work/runsc" ./runsc
)
mkdir -p "$RUNSC_PREFIX"
install -m 0755 "$work/runsc" "$bin.tmp.$$"
mv -f "$bin.tmp.$$" "$bin"
if [ "$(first_line "$bin")" != "runsc version $version" ]; then
  echo "install-runsc: $bin does not report version $version:" >&2
  "$bin" --version >&2 || true
  exit 1
fi
echo "install-runsc: built runsc $version in $(( $(date +%s) - start ))s" >&2
