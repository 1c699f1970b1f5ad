#!/usr/bin/env bash
# Runs Warden's whole test suite. Needs root: the native backend's conformance
# suite starts real sandboxes (user namespaces, cgroups, idmapped mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "scripts/test.sh: run as root (the sandbox tests create namespaces and cgroups): sudo $0" >&2
  exit 1
fi
# First, the README's first command as a new user runs it, timed: on CI's
# clean clone this is a fresh machine's start ("first sandbox ready in N s"
# in the log). Its own directories, no TCP listeners and no warm pool, so it
# leaves nothing behind; runsc keeps building in the background, and the
# install step below waits for that build instead of starting a second one.
echo "== first start (scripts/run.sh, timed)" >&2
first=$(mktemp -d /tmp/warden-first-run.XXXXXX)
WARDEN_RUN_ONCE=1 WARDEN_STATE_DIR="$first/state" WARDEN_RUN_DIR="$first/run" WARDEN_SOCKET="$first/run/wardend.sock" \
  ./scripts/run.sh --listen "" --e2b-listen "" --metrics-listen "" --pool-size 0
rm -rf --one-file-system "$first"
./scripts/install-deps.sh
export CGO_ENABLED=${CGO_ENABLED:-0}
echo "== go vet" >&2
go vet ./...
echo "== go test (main module)" >&2
go test -count=1 -timeout 30m ./...
if [ -f sdk/go/go.mod ]; then
  echo "== go test (sdk/go)" >&2
  (cd sdk/go && go vet ./... && go test -count=1 ./...)
fi
