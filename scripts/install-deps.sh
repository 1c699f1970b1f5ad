#!/usr/bin/env bash
# Installs what Warden needs on a fresh Debian 12 machine (as root): the
# userland the `base` template exposes to sandboxes (bash, coreutils,
# python3, node, npm, git, R, a JDK) and the tools the tests and benchmarks use (bubblewrap
# as a baseline, util-linux for unshare, debootstrap for the Debian image
# test, e2fsprogs and mount for the sandboxes' disk images, systemd-analyze
# for the unit `wardend install` writes). Idempotent: skips what is there.
set -euo pipefail
need=()
for pair in python3:python3 git:git ip:iproute2 bwrap:bubblewrap unshare:util-linux node:nodejs npm:npm setpriv:util-linux debootstrap:debootstrap tar:tar mkfs.ext4:e2fsprogs losetup:mount systemd-analyze:systemd; do
  bin=${pair%%:*}; pkg=${pair##*:}
  command -v "$bin" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The code interpreter: matplotlib, numpy, pandas and PIL for the system python3
# (what E2B's code-interpreter template has), which the base template shares
# with the host's /usr, so charts come back as PNG and dataframes work;
# the real TypeScript compiler, installed globally where sandboxes find it
# (/usr/lib/node_modules or /usr/local/lib/node_modules).
if ! /usr/bin/python3 -c 'import matplotlib, numpy, pandas, PIL' >/dev/null 2>&1; then
  echo "install-deps: installing python3-matplotlib python3-numpy python3-pandas python3-pil" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends python3-matplotlib python3-numpy python3-pandas python3-pil >/dev/null
fi
# pytest and mypy from Debian for the Python SDK's suite and type check (sdk/python, run by
# test/sdk).
if ! /usr/bin/python3 -c 'import pytest, mypy' >/dev/null 2>&1; then
  echo "install-deps: installing python3-pytest python3-mypy" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends python3-pytest python3-mypy >/dev/null
fi
# R and a JDK for the code interpreter's r and java kernels (E2B's template
# has IRkernel and IJava): Rscript, and java, javac and the jdk.jshell module
# that the Java driver evaluates snippets with. Like python3, sandboxes of
# the base template get them from the host's /usr (and /etc/R).
if ! command -v Rscript >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1 || ! command -v jshell >/dev/null 2>&1; then
  echo "install-deps: installing r-base-core default-jdk-headless" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends r-base-core default-jdk-headless >/dev/null
fi
if command -v npm >/dev/null 2>&1 && ! node -e 'require(require("path").join(process.argv[1], "typescript"))' "$(npm root -g)" >/dev/null 2>&1; then
  echo "install-deps: installing typescript@5 (npm -g)" >&2
  npm install -g --silent typescript@5 >/dev/null
fi

# gVisor's runsc for the gvisor backend (a pinned source build, about six
# minutes; see the script). WARDEN_RUNSC picks how: sync (the default, what
# scripts/test.sh needs: the gvisor tests run after it), background (what
# scripts/run.sh uses: the build runs detached, niced, logged to
# /var/log/warden-runsc-build.log, and a running wardend enables gvisor
# sandboxes when runsc appears, without a restart), or skip.
here=$(dirname "$0")
case "${WARDEN_RUNSC:-sync}" in
  # The same lock as a background build: wait for one in progress (it may
  # have installed runsc by then) instead of building a second time.
  sync) flock /run/warden-runsc-build.lock "$here/install-runsc.sh" ;;
  background)
    if ! "$here/install-runsc.sh" --check; then
      log=/var/log/warden-runsc-build.log
      echo "install-deps: building runsc in the background (about six minutes; log: $log); wardend serves native sandboxes meanwhile and enables gvisor when runsc is ready" >&2
      # flock: one build at a time, however often this runs.
      setsid flock -n /run/warden-runsc-build.lock nice -n 10 "$here/install-runsc.sh" >>"$log" 2>&1 </dev/null &
    fi
    ;;
  skip) ;;
  *) echo "install-deps: WARDEN_RUNSC must be sync, background or skip, not ${WARDEN_RUNSC}" >&2; exit 2 ;;
esac
