"""Templates: list, get, build with streamed logs, boot, delete, store usage."""

import os
import uuid

import warden


def test_templates(client: warden.Warden, tmp_path: "os.PathLike[str]") -> None:
    names = [t["name"] for t in client.templates.list()]
    assert any(n.startswith("base") for n in names), names
    base = client.templates.get("base")
    assert base["id"]

    ctx = os.fspath(tmp_path)
    with open(os.path.join(ctx, "Dockerfile"), "w") as f:
        f.write("FROM base\nUSER root\nCOPY hello.txt /opt/hello.txt\nRUN echo built-$((40+2)) && cat /opt/hello.txt > /opt/copy.txt\n")
    name = "py-sdk-" + uuid.uuid4().hex[:6]
    with open(os.path.join(ctx, "hello.txt"), "w") as f:
        f.write(f"hello from {name}\n")  # new content: the RUN step is not cached
    logs: list[str] = []
    kinds: list[str] = []
    res = client.templates.build(name, ctx, on_log=logs.append, on_event=lambda e: kinds.append(e["type"]))
    assert any("built-42" in ln for ln in logs), logs
    assert "step" in kinds and "result" in kinds
    assert res["id"]
    try:
        with client.sandboxes.create(name, timeout_seconds=120) as sb:
            assert sb.files.read("/opt/copy.txt") == f"hello from {name}\n"
    finally:
        client.templates.delete(name)
    assert "bytes" in client.templates.usage()
