# Warden code-interpreter driver for bash: per run, two NUL-terminated
# strings on fd 3, the cell and an epilogue, evaluated in this shell (so
# variables, functions, cwd persist; the epilogue restores what the run's own
# environment variables replaced); stdout/stderr go to the agent's pipes,
# closed per run by a sync marker; the exit status goes to fd 4 as a JSON line.
trap ':' INT
printf '{"type":"ready","pid":%d}\n' "$$" >&4
while IFS= read -r -d '' -u 3 __warden_code && IFS= read -r -d '' -u 3 __warden_after; do
  eval "$__warden_code"
  __warden_rc=$?
  eval "$__warden_after"
  printf '\000\033warden-sync\000'
  printf '\000\033warden-sync\000' >&2
  printf '{"type":"done","exit_code":%d}\n' "$__warden_rc" >&4
done
