//go:build linux

package main

// The sibling sandbox's half of probe 20: -serve-sibling plants canaries a
// probed sandbox must not reach (SysV IPC objects, a TCP listener on the
// sibling's own loopback, an abstract unix socket) and serves until killed;
// -check-sibling verifies afterwards, from inside the sibling, that they all
// still exist, so the probe's "not found" means "invisible", not "never
// made".

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

const siblingHello = "warden-sibling"

func siblingListeners() (tcp, abs net.Listener, err error) {
	tcp, err = net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.SiblingPort)))
	if err != nil {
		return nil, nil, fmt.Errorf("listen tcp: %w", err)
	}
	if opts.SiblingAbs != "" {
		abs, err = net.Listen("unix", "@"+opts.SiblingAbs)
		if err != nil {
			tcp.Close()
			return nil, nil, fmt.Errorf("listen abstract: %w", err)
		}
	}
	return tcp, abs, nil
}

func serveHello(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		fmt.Fprintln(c, siblingHello)
		c.Close()
	}
}

func runServeSibling() int {
	key := opts.IPCKey
	if key == 0 || opts.SiblingPort == 0 {
		fmt.Fprintln(os.Stderr, "-serve-sibling needs -ipc-key and -sibling-port")
		return 2
	}
	if _, err := unix.SysvShmGet(key, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o600); err != nil {
		fmt.Println("error shmget:", describe(err))
		return 1
	}
	if e := rawErr(unix.SYS_MSGGET, uintptr(key), unix.IPC_CREAT|unix.IPC_EXCL|0o600); e != 0 {
		fmt.Println("error msgget:", describe(e))
		return 1
	}
	if e := rawErr(unix.SYS_SEMGET, uintptr(key), 1, unix.IPC_CREAT|unix.IPC_EXCL|0o600); e != 0 {
		fmt.Println("error semget:", describe(e))
		return 1
	}
	tcp, abs, err := siblingListeners()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	go serveHello(tcp)
	if abs != nil {
		go serveHello(abs)
	}
	fmt.Println("ready")
	select {}
}

func runCheckSibling() int {
	r := newReporter()
	const id = 20
	key := opts.IPCKey
	_, err := unix.SysvShmGet(key, 0, 0)
	r.check(id, "sibling-own-shm", err == nil, "shmget: "+describe(err))
	e := rawErr(unix.SYS_MSGGET, uintptr(key), 0)
	r.check(id, "sibling-own-msg", e == 0, "msgget: "+describe(errOrNil(e)))
	e = rawErr(unix.SYS_SEMGET, uintptr(key), 0, 0)
	r.check(id, "sibling-own-sem", e == 0, "semget: "+describe(errOrNil(e)))
	hello := func(network, addr string) (bool, string) {
		c, err := net.DialTimeout(network, addr, 2*time.Second)
		if err != nil {
			return false, describe(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || line != siblingHello+"\n" {
			return false, fmt.Sprintf("read %q: %v", line, err)
		}
		return true, "answered"
	}
	ok, d := hello("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.SiblingPort)))
	r.check(id, "sibling-own-port", ok, d)
	if opts.SiblingAbs != "" {
		ok, d = hello("unix", "@"+opts.SiblingAbs)
		r.check(id, "sibling-own-abstract", ok, d)
	}
	r.emit(Result{ID: 0, Name: "complete", Pass: true, Detail: "sibling checked"})
	return 0
}

func errOrNil(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
