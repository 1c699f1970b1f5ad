"""exec: streaming callbacks and iterators, stdin, background processes, signals, reattach."""

from __future__ import annotations

import time

import pytest

import warden


def test_exec_capture_and_callbacks(sandbox: warden.Sandbox) -> None:
    out: list[str] = []
    err: list[str] = []
    r = sandbox.exec("for i in 1 2 3; do echo out$i; echo err$i >&2; done; exit 7",
                     on_stdout=out.append, on_stderr=err.append)
    assert r.exit_code == 7 and not r.ok
    assert "".join(out) == "out1\nout2\nout3\n" == r.stdout
    assert "".join(err) == "err1\nerr2\nerr3\n" == r.stderr


def test_exec_argv_env_cwd(sandbox: warden.Sandbox) -> None:
    r = sandbox.exec(["sh", "-c", "echo $A $(pwd)"], env={"A": "x y"}, cwd="/tmp")
    assert r.stdout == "x y /tmp\n"
    assert sandbox.exec(["id", "-un"], user="root").stdout.strip() == "root"


def test_exec_iterator(sandbox: warden.Sandbox) -> None:
    with sandbox.start(["sh", "-c", "echo a; sleep 0.2; echo b >&2"]) as p:
        assert p.pid > 0
        pieces = [(o.stream, o.text) for o in p]
        assert ("stdout", "a\n") in pieces and ("stderr", "b\n") in pieces
        assert p.result is not None and p.result.exit_code == 0


def test_exec_stdin(sandbox: warden.Sandbox) -> None:
    data = "line\n" * 10000
    r = sandbox.exec("wc -l", input=data)
    assert r.stdout.strip() == "10000"


def test_exec_timeout(sandbox: warden.Sandbox) -> None:
    r = sandbox.exec("sleep 30", timeout_seconds=1)
    assert not r.ok


def test_background_process_reattach_from_second_client(sandbox: warden.Sandbox) -> None:
    p = sandbox.start(["sh", "-c", "while read l; do echo got:$l; done; echo bye"], stdin=True, tag="bg")
    pid = p.pid
    p.send_stdin("one\n")
    first = next(iter(p))
    assert first.text == "got:one\n"
    p.disconnect()  # the process keeps running

    other = warden.Warden()  # a second client, as another program would be
    sb2 = other.sandbox(sandbox.id)
    procs = {x["pid"]: x for x in sb2.processes()}
    assert pid in procs and not procs[pid]["exited"] and procs[pid]["tag"] == "bg"
    with sb2.attach(pid) as again:
        sb2.send_stdin(pid, "two\n")
        sb2.close_stdin(pid)
        res = again.wait()
    assert "got:two\n" in res.stdout and res.stdout.endswith("bye\n")
    assert res.exit_code == 0


def test_signal(sandbox: warden.Sandbox) -> None:
    p = sandbox.start("sleep 60")
    time.sleep(0.2)
    p.signal("SIGTERM")
    res = p.wait()
    assert res.signal == 15 or res.exit_code != 0
    with pytest.raises((warden.NotFoundError, warden.ConflictError, warden.ValidationError)):
        sandbox.signal(p.pid, "SIGNOPE")
