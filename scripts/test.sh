#!/usr/bin/env bash
# Runs Warden's whole test suite. Needs root: the native backend's conformance
# suite starts real sandboxes (user namespaces, cgroups, idmapped mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "scripts/test.sh: run as root (the sandbox tests create namespaces and cgroups): sudo $0" >&2
  exit 1
fi
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
