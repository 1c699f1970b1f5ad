#!/usr/bin/env bash
# Sets up and runs Warden on a fresh Debian machine: installs what it needs,
# builds the binaries, and starts wardend in the foreground with the embedded
# SQLite store and the built-in `base` template (no download).
# Extra arguments go to wardend (see bin/wardend --help).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "scripts/run.sh: wardend needs root (user namespaces with a uid range per sandbox, cgroups): sudo $0" >&2
  exit 1
fi
./scripts/install-deps.sh
./scripts/build.sh
echo "starting wardend; in another terminal: export PATH=\$PWD/bin:\$PATH; sudo -E warden sandbox create" >&2
exec ./bin/wardend "$@"
