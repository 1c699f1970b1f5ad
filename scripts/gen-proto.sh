#!/usr/bin/env bash
# Regenerates the Go code for the agent protocol from spec/agent/*.proto.
# Needs protoc (apt: protobuf-compiler); installs the Go plugins at pinned versions.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOBIN="${GOBIN:-$(go env GOPATH)/bin}"
export PATH="$GOBIN:$PATH"
go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
protoc -I spec/agent \
  --go_out=. --go_opt=module=github.com/warden-sandbox/warden \
  --connect-go_out=. --connect-go_opt=module=github.com/warden-sandbox/warden \
  spec/agent/process/process.proto spec/agent/filesystem/filesystem.proto
