#!/usr/bin/env bash
# Installs what Warden needs on a fresh Debian 12 machine (as root): the
# userland the `base` template exposes to sandboxes (bash, coreutils,
# python3, node, git) and the tools the tests and benchmarks use (bubblewrap
# as a baseline, util-linux for unshare). Idempotent: skips what is there.
set -euo pipefail
need=()
for pair in python3:python3 git:git bwrap:bubblewrap unshare:util-linux node:nodejs setpriv:util-linux; do
  bin=${pair%%:*}; pkg=${pair##*:}
  command -v "$bin" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
