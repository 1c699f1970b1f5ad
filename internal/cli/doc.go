// Package cli implements the warden command: the command-line client of the Warden
// daemon. Every command talks to wardend through the Go SDK (sdk/go) and nothing else, so
// the CLI behaves the same against the local socket and a remote daemon; TestDeps keeps it
// from importing any other internal package.
//
// [Main] is the whole program: cmd/warden only wires it to the process's arguments,
// standard streams and signals. [Run] takes an [Env] instead, so that tests run commands
// in-process with their own streams, environment, clock and terminal. Neither calls
// os.Exit: they return the exit status, which for `warden exec` and `warden process attach`
// is the remote command's.
//
// # Commands
//
//	warden sandbox create|ls|inspect|kill|timeout|pause|resume|fork|usage|net|url
//	warden template build|import|ls|inspect|rm|du|gc
//	warden secret put|ls|grant|revoke|rm
//	warden exec [-i] [-t] ID -- CMD [ARG...]
//	warden run ID [CODE]               (the sandbox's code interpreter)
//	warden contexts ls|create|restart|rm ID ...
//	warden process ls|attach|signal ID ...
//	warden logs ID [-f]
//	warden cp SRC DST                 (either side ID:/path; "-" for stdin/stdout)
//	warden fs ls|cat|stat|mkdir|mv|rm|watch ID PATH ...
//	warden keys create|ls|revoke
//	warden principals create|ls
//	warden policy create|ls|show|edit|rm|test
//	warden approvals ls|approve|reject
//	warden guard test [TEXT|-] [--json-file FILE]
//	warden whoami
//	warden audit ls|verify
//	warden version
//	warden completion bash|zsh|fish
//	warden help [COMMAND...]
//
// Wherever a command takes a sandbox ID it also takes the sandbox's name.
//
// Process commands are folded under `warden process` (noun, then verb, like the other
// groups); `process ls` is also `process ps`, and `process signal` also `process kill`.
//
// # Layout
//
// Each command lives in its own file (sandbox_create.go, exec.go, cp.go, ...) and is a
// command value: a name, help text, a flag set built on the standard flag package, and a
// run function that returns an error. Flags may follow positional arguments (up to "--");
// exec stops at the command. One place, Run, turns errors into a one-line
// "warden: message", a "hint:" line with the next step, and the exit status: 0, 1 for
// failures, 2 for usage errors, 130 when interrupted.
//
// Help output and tables are pinned by golden files under testdata; regenerate them with
// go test ./internal/cli -update.
package cli
