"""Ports: the proxy with the key, publishing, preview URLs."""

import time
import urllib.error
import urllib.request

import warden


def _get(url: str, key: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_ports(client: warden.Warden, sandbox: warden.Sandbox) -> None:
    sandbox.files.write("/tmp/site/index.html", "served from the sandbox")
    srv = sandbox.start(["python3", "-m", "http.server", "8123", "--directory", "/tmp/site"], tag="web")
    try:
        key = client._tr.api_key
        status = 0
        for _ in range(50):  # until the server listens
            status, body = _get(sandbox.proxy_url(8123, "index.html"), key)
            if status == 200:
                break
            time.sleep(0.2)
        assert status == 200 and body == b"served from the sandbox"
        assert _get(sandbox.proxy_url(8123, "index.html"))[0] in (401, 403)  # private: no key, no entry

        pub = sandbox.publish_port(8123)
        assert pub["public"] is True and pub["port"] == 8123
        assert _get(pub["url"] + "index.html")[0] == 200
        sandbox.unpublish_port(8123)
        assert _get(pub["url"] + "index.html")[0] in (401, 403)

        prev = sandbox.preview_url(8123, expires_seconds=60)
        st, body = _get(prev["url"].replace("/proxy/", "/proxy/index.html", 1) if prev["url"].endswith("/proxy/") else prev["url"])
        assert st == 200, (prev, st, body)
    finally:
        srv.kill()
