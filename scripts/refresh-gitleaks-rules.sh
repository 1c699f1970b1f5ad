#!/bin/sh
# Refresh internal/guard/secrets/rules/gitleaks.toml (the secret detector's
# rule set) from a gitleaks release, through the Go module proxy, without
# adding gitleaks to go.mod.
#
#   scripts/refresh-gitleaks-rules.sh [VERSION]     (default: the version in use)
#
# Then update GitleaksVersion in internal/guard/secrets/rules.go and run
#   CGO_ENABLED=0 go test ./internal/guard/secrets ./internal/guard/eval
# to check that the rules compile and that the evaluation bars still hold.
set -eu
cd "$(dirname "$0")/.."
version=${1:-$(sed -n 's/^const GitleaksVersion = "\(.*\)"/\1/p' internal/guard/secrets/rules.go)}
dir=$(go mod download -json "github.com/zricethezav/gitleaks/v8@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] && [ -f "$dir/config/gitleaks.toml" ] || { echo "gitleaks $version: config/gitleaks.toml not found" >&2; exit 1; }
dst=internal/guard/secrets/rules
install -m 0644 "$dir/config/gitleaks.toml" "$dst/gitleaks.toml"
install -m 0644 "$dir/LICENSE" "$dst/LICENSE.gitleaks"
echo "rules from gitleaks $version: $(grep -c '^\[\[rules\]\]' "$dst/gitleaks.toml") rules"
