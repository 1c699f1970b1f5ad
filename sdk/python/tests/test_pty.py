"""PTY over the WebSocket."""

import warden


def test_pty(sandbox: warden.Sandbox) -> None:
    with sandbox.pty("/bin/sh", cols=100, rows=30) as t:
        t.resize(120, 40)
        t.write("stty size; echo pty-$((6*7)); exit 3\n")
        out = bytearray()
        code = t.wait(on_data=out.extend)
    assert b"pty-42" in out
    assert b"40 120" in out
    assert code == 3
