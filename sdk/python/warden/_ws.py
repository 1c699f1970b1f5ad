"""A minimal RFC 6455 WebSocket client (the standard library has none) for the PTY."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import struct
import threading
from typing import Mapping

from . import errors
from ._http import Endpoint

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
MAX_FRAME = 16 << 20


def _mask(data: bytes, key: bytes) -> bytes:
    if not data:
        return data
    n = len(data)
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(k, "little")).to_bytes(n, "little")


class WebSocket:
    """One client connection. ``recv`` returns (opcode, payload) of a whole message."""

    def __init__(self, sock: socket.socket, leftover: bytes) -> None:
        self._sock = sock
        self._buf = bytearray(leftover)
        self._send_lock = threading.Lock()
        self.closed = False

    @classmethod
    def connect(cls, ep: Endpoint, path: str, headers: Mapping[str, str], timeout: float | None,
                ssl_context: ssl.SSLContext | None = None) -> "WebSocket":
        try:
            if ep.scheme == "unix":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                sock.connect(ep.socket_path)
            else:
                port = ep.port or (443 if ep.scheme == "https" else 80)
                sock = socket.create_connection((ep.host, port), timeout=timeout)
                if ep.scheme == "https":
                    ctx = ssl_context or ssl.create_default_context()
                    sock = ctx.wrap_socket(sock, server_hostname=ep.host)
        except OSError as e:
            raise errors.ConnectionError(f"connect websocket: {e}") from e
        key = base64.b64encode(os.urandom(16)).decode()
        host = ep.host if ep.scheme == "unix" or not ep.port else f"{ep.host}:{ep.port}"
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Connection: Upgrade", "Upgrade: websocket",
                 "Sec-WebSocket-Version: 13", f"Sec-WebSocket-Key: {key}"]
        lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() != "accept"]
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(65536)
                if not chunk:
                    raise errors.ConnectionError("websocket handshake: connection closed")
                buf += chunk
                if len(buf) > 1 << 20:
                    raise errors.ConnectionError("websocket handshake: response too large")
        except OSError as e:
            sock.close()
            raise errors.ConnectionError(f"websocket handshake: {e}") from e
        head, rest = buf.split(b"\r\n\r\n", 1)
        status_line, *hdr_lines = head.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        hdrs = {}
        for ln in hdr_lines:
            if ":" in ln:
                k, v = ln.split(":", 1)
                hdrs[k.strip().title()] = v.strip()
        if status != 101:
            try:
                want = int(hdrs.get("Content-Length", "0"))
                sock.settimeout(timeout or 10)
                while len(rest) < min(want, 65536):
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    rest += chunk
            except (OSError, ValueError):
                pass
            finally:
                sock.close()
            raise errors.error_from_response(status, {"X-Request-Id": hdrs.get("X-Request-Id", ""),
                                                      "Retry-After": hdrs.get("Retry-After", "")}, rest)
        accept = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()
        if hdrs.get("Sec-Websocket-Accept") != accept:
            sock.close()
            raise errors.ConnectionError("websocket handshake: bad Sec-WebSocket-Accept")
        sock.settimeout(None)
        return cls(sock, rest)

    def send(self, opcode: int, payload: bytes) -> None:
        head = bytearray([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head.append(0x80 | n)
        elif n < 1 << 16:
            head.append(0x80 | 126)
            head += struct.pack(">H", n)
        else:
            head.append(0x80 | 127)
            head += struct.pack(">Q", n)
        key = os.urandom(4)
        with self._send_lock:
            try:
                self._sock.sendall(bytes(head) + key + _mask(payload, key))
            except OSError as e:
                raise errors.ConnectionError(f"websocket send: {e}") from e

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            try:
                chunk = self._sock.recv(max(65536, n - len(self._buf)))
            except OSError as e:
                raise errors.ConnectionError(f"websocket read: {e}") from e
            if not chunk:
                raise errors.ConnectionError("websocket closed without a close frame")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def recv(self) -> tuple[int, bytes]:
        """Returns the next data message, answering pings; (OP_CLOSE, payload) at the end."""
        msg_op, parts = None, []
        while True:
            b0, b1 = self._read(2)
            op, fin = b0 & 0x0F, b0 & 0x80
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            if n > MAX_FRAME:
                raise errors.StreamError("websocket frame too large")
            key = self._read(4) if b1 & 0x80 else b""
            data = self._read(n)
            if key:
                data = _mask(data, key)
            if op == OP_PING:
                self.send(OP_PONG, data)
                continue
            if op == OP_PONG:
                continue
            if op == OP_CLOSE:
                if not self.closed:
                    self.closed = True
                    try:
                        self.send(OP_CLOSE, data[:2])
                    except errors.WardenError:
                        pass
                return OP_CLOSE, data
            if op != OP_CONT:
                msg_op = op
            parts.append(data)
            if fin:
                return msg_op or OP_BINARY, b"".join(parts)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.send(OP_CLOSE, struct.pack(">H", 1000))
            except errors.WardenError:
                pass
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
