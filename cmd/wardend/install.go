package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/config"
)

// DefaultUnitPath is where `wardend install` writes its systemd unit.
const DefaultUnitPath = "/etc/systemd/system/wardend.service"

// unitFile renders the systemd unit that runs exe with args.
//
// KillMode=process: stopping or restarting the service ends wardend only;
// its sandboxes keep running and the next start re-attaches them, as after
// any daemon restart (systemd's default would kill every sandbox process
// started from the service). Delegate=yes: wardend manages cgroups itself.
func unitFile(exe string, args []string) string {
	cmd := []string{systemdQuote(exe)}
	for _, a := range args {
		cmd = append(cmd, systemdQuote(a))
	}
	return `# Written by "wardend install"; remove with "wardend uninstall".
[Unit]
Description=Warden sandbox daemon (wardend)
Documentation=https://github.com/warden-sandbox/warden
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
ExecStart=` + strings.Join(cmd, " ") + `
Restart=on-failure
RestartSec=2s
KillMode=process
Delegate=yes
LimitNOFILE=1048576
TasksMax=infinity

[Install]
WantedBy=multi-user.target
`
}

// systemdQuote quotes s for a systemd command line when it needs it
// (systemd.syntax: double quotes, backslash escapes; "$" and "%" are
// expanded by systemd, so they are doubled).
func systemdQuote(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	s = strings.ReplaceAll(s, "$", "$$")
	if s != "" && !strings.ContainsAny(s, " \t\n\"'\\;") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}

// systemdRunning reports whether systemd is the init system (sd_booted).
func systemdRunning() bool {
	fi, err := os.Stat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// install implements `wardend install [--unit PATH] [--enable] [-- wardend flags]`.
func install(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("wardend install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	unit := fs.String("unit", DefaultUnitPath, "where to write the systemd unit")
	enable := fs.Bool("enable", false, "also run systemctl daemon-reload and systemctl enable --now (needs systemd as init)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "wardend install: write a systemd unit that runs this wardend as a service\n\n"+
			"Usage: wardend install [--unit PATH] [--enable] [-- WARDEND FLAGS]\n\n"+
			"The flags after -- are checked now and become the service's (for example -- --state-dir /srv/warden).\n"+
			"Stopping the service leaves sandboxes running; the next start re-attaches them.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	daemonArgs := fs.Args()
	// Check the service's flags now, not at its first start, as the
	// service will see them: no WARDEN_* variables from this shell.
	cfs := flag.NewFlagSet("wardend", flag.ContinueOnError)
	cfs.SetOutput(io.Discard)
	cfg, err := config.Load(daemonArgs, func(string) string { return "" }, cfs)
	if err == nil {
		// The registry (this build's backends) decides backend names.
		err = backend.CheckID(cfg.Backend)
	}
	if err != nil {
		fmt.Fprintf(stderr, "wardend install: the service's flags %q: %v\n", daemonArgs, err)
		return 2
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		fmt.Fprintf(stderr, "wardend install: find this executable: %v\n", err)
		return 1
	}
	if err := writeUnit(*unit, []byte(unitFile(exe, daemonArgs))); err != nil {
		fmt.Fprintf(stderr, "wardend install: %v\n", err)
		return 1
	}
	name := filepath.Base(*unit)
	fmt.Fprintf(stdout, "wrote %s (ExecStart=%s; state in %s)\n", *unit, exe, cfg.StateDir)
	if !*enable {
		fmt.Fprintf(stdout, "start it now and at every boot: systemctl daemon-reload && systemctl enable --now %s\n", name)
		return 0
	}
	if !systemdRunning() {
		fmt.Fprintf(stderr, "wardend install: --enable: systemd is not the init system here (no /run/systemd/system); the unit is written but not enabled\n")
		return 1
	}
	for _, c := range [][]string{{"daemon-reload"}, {"enable", "--now", name}} {
		if err := systemctl(c...); err != nil {
			fmt.Fprintf(stderr, "wardend install: %v\n", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "enabled and started %s; logs: journalctl -u %s\n", name, name)
	return 0
}

// uninstall implements `wardend uninstall [--unit PATH]`.
func uninstall(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("wardend uninstall", flag.ContinueOnError)
	fs.SetOutput(stderr)
	unit := fs.String("unit", DefaultUnitPath, "the systemd unit to remove")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "wardend uninstall: stop and disable the service and remove its unit (state and sandboxes are kept)\n\nUsage: wardend uninstall [--unit PATH]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "wardend uninstall: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	name := filepath.Base(*unit)
	if _, err := os.Stat(*unit); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(stdout, "%s is not installed\n", *unit)
		return 0
	}
	if systemdRunning() {
		if err := systemctl("disable", "--now", name); err != nil {
			fmt.Fprintf(stderr, "wardend uninstall: %v\n", err)
			return 1
		}
	}
	if err := os.Remove(*unit); err != nil {
		fmt.Fprintf(stderr, "wardend uninstall: %v\n", err)
		return 1
	}
	if systemdRunning() {
		if err := systemctl("daemon-reload"); err != nil {
			fmt.Fprintf(stderr, "wardend uninstall: %v\n", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "removed %s (the state directory and running sandboxes are kept)\n", *unit)
	return 0
}

// writeUnit writes the unit atomically (0644, like the units systemd ships).
func writeUnit(path string, content []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, content, 0o644); err != nil {
		return fmt.Errorf("write unit: %w", err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil { // whatever the umask
		os.Remove(tmp)
		return fmt.Errorf("write unit: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write unit: %w", err)
	}
	return nil
}

func systemctl(args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command("systemctl", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("systemctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
