#!/usr/bin/env bash
# Builds Warden's binaries into bin/: wardend (daemon), warden (CLI),
# warden-agent (static in-sandbox agent) and warden-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
ver=$(git describe --always --dirty 2>/dev/null || echo dev)
ld="-X github.com/warden-sandbox/warden/internal/version.Version=$ver -X github.com/warden-sandbox/warden/internal/cli.Version=$ver"
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o bin/ ./cmd/wardend ./cmd/warden ./cmd/warden-agent ./cmd/warden-bench
echo "built: $(ls bin | tr '\n' ' ')" >&2
