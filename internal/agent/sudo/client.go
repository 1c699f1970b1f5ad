package sudo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Main is the sudo program: it runs args (sudo's command line without the
// program name) through the agent listening at socket and returns the exit
// status to exit with (the command's; 128+n when a signal n ended it; 1
// for sudo's own errors).
func Main(args []string, socket string, stderr io.Writer) int {
	o, err := Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "sudo: %s\n", strings.TrimPrefix(err.Error(), ErrUsage.Error()+": "))
		fmt.Fprint(stderr, usageText)
		return 1
	}
	if o.Help {
		fmt.Fprint(stderr, usageText)
		return 0
	}
	if o.Version {
		fmt.Fprintln(stderr, "Warden sudo (runs commands through the sandbox's agent)")
		return 0
	}
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			fmt.Fprintln(stderr, "sudo: this sandbox does not allow sudo (created with sudo: false), or its agent is not serving it")
		} else {
			fmt.Fprintf(stderr, "sudo: connect to the agent: %v\n", err)
		}
		return 1
	}
	defer c.Close()
	cwd, _ := os.Getwd()
	b, err := json.Marshal(request{Options: o, Env: os.Environ(), Cwd: cwd})
	if err != nil || len(b) > maxMsg {
		fmt.Fprintln(stderr, "sudo: the command line and environment are too large")
		return 1
	}
	// Forward what a terminal or a supervisor sends us to the command.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT)
	defer signal.Stop(sigs)
	if _, _, err := c.WriteMsgUnix(b, unix.UnixRights(0, 1, 2), nil); err != nil {
		fmt.Fprintf(stderr, "sudo: send the request: %v\n", err)
		return 1
	}
	go func() {
		for s := range sigs {
			m, _ := json.Marshal(control{Signal: int(s.(syscall.Signal))})
			c.Write(m)
		}
	}()
	buf := make([]byte, 64<<10)
	n, err := c.Read(buf)
	if err != nil {
		fmt.Fprintf(stderr, "sudo: the agent closed the connection: %v\n", err)
		return 1
	}
	var r reply
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		fmt.Fprintf(stderr, "sudo: bad reply from the agent: %v\n", err)
		return 1
	}
	switch {
	case r.Error != "":
		fmt.Fprintln(stderr, r.Error)
		return 1
	case r.Signal > 0:
		return 128 + r.Signal
	case r.Exit != nil:
		return *r.Exit
	}
	fmt.Fprintln(stderr, "sudo: empty reply from the agent")
	return 1
}
