#!/usr/bin/env bash
# Sets up and runs Warden on a fresh Debian machine: installs what it needs,
# builds the binaries, and runs wardend in the foreground with the embedded
# SQLite store and the built-in `base` template (no download). gVisor's runsc
# builds in the background meanwhile (about six minutes): native sandboxes
# serve at once, gvisor ones once the build is done (no restart).
# Once wardend serves, it starts a first sandbox and prints the time from the
# start of this script ("first sandbox ready in N s"), then kills it.
# Extra arguments go to wardend (see bin/wardend --help); its WARDEN_*
# environment variables work too, and the first sandbox follows
# WARDEN_STATE_DIR and WARDEN_SOCKET. WARDEN_RUN_ONCE=1 stops wardend after
# the first sandbox and exits with its verdict (scripts/test.sh times a
# fresh start that way). To keep wardend running without a terminal:
# sudo bin/wardend install (a systemd unit).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s.%N)
if [ "$(id -u)" != 0 ]; then
  echo "scripts/run.sh: wardend needs root (user namespaces with a uid range per sandbox, cgroups): sudo $0" >&2
  exit 1
fi
WARDEN_RUNSC=${WARDEN_RUNSC:-background} ./scripts/install-deps.sh
./scripts/build.sh

./bin/wardend "$@" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null' INT TERM

# The first sandbox, through the CLI as a user would (the default socket and
# the admin key file, or where WARDEN_SOCKET and WARDEN_STATE_DIR put them;
# with other --socket or --state-dir flags it may not find the daemon, which
# then keeps running all the same).
first_sandbox() {
  local id i
  # The daemon's own socket and admin key, where the environment moved them.
  if [ -z "${WARDEN_URL:-}" ] && [ -n "${WARDEN_SOCKET:-}" ]; then export WARDEN_URL="unix://$WARDEN_SOCKET"; fi
  local keyfile="${WARDEN_STATE_DIR:-/var/lib/warden}/admin.key"
  for i in $(seq 1 600); do
    kill -0 $pid 2>/dev/null || return 1
    if [ -z "${WARDEN_API_KEY:-}" ] && [ -r "$keyfile" ]; then export WARDEN_API_KEY=$(cat "$keyfile"); fi
    ./bin/warden sandbox ls -q >/dev/null 2>&1 && break
    sleep 0.1
  done
  id=$(./bin/warden sandbox create --timeout 1m) || return 1
  ./bin/warden exec "$id" -- true || { ./bin/warden sandbox kill "$id" >/dev/null 2>&1; return 1; }
  ./bin/warden sandbox kill "$id" >/dev/null 2>&1 || true
}
ok=0
if first_sandbox; then
  ok=1
  echo "scripts/run.sh: first sandbox ready in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s (since this script started)" >&2
  [ "${WARDEN_RUN_ONCE:-}" = 1 ] || echo "scripts/run.sh: in another terminal: export PATH=\$PWD/bin:\$PATH; sudo -E warden sandbox create" >&2
elif kill -0 $pid 2>/dev/null; then
  echo "scripts/run.sh: could not start a first sandbox through the CLI's defaults; wardend keeps running" >&2
fi
if [ "${WARDEN_RUN_ONCE:-}" = 1 ]; then
  kill -TERM $pid 2>/dev/null
  wait $pid || true
  [ $ok = 1 ] || { echo "scripts/run.sh: no first sandbox" >&2; exit 1; }
  exit 0
fi
set +e
wait $pid
rc=$?
# A signal interrupted the first wait: wait for wardend's own exit.
kill -0 $pid 2>/dev/null && { wait $pid; rc=$?; }
exit $rc
