"""Code interpreter: state across runs, streamed output, rich results, errors, contexts."""

import pytest

import warden


def test_run_code(sandbox: warden.Sandbox) -> None:
    out: list[str] = []
    ex = sandbox.run_code("x = 21\nprint('side')\nx * 2", on_stdout=out.append)
    assert ex.text == "42"
    assert "".join(out) == "side\n" == "".join(ex.stdout)
    assert ex.error is None and ex.execution_count >= 1
    assert sandbox.run_code("x + 1").text == "22"  # state persists

    ex = sandbox.run_code("1/0")
    assert ex.error is not None and ex.error.name == "ZeroDivisionError"


def test_chart_as_bytes(sandbox: warden.Sandbox) -> None:
    ex = sandbox.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
    if ex.error is not None and ex.error.name == "ModuleNotFoundError":
        pytest.skip("SKIP: the sandbox's python has no matplotlib")
    pngs = [r.png_bytes() for r in ex.results if r.png_bytes()]
    assert pngs and pngs[0][:8] == b"\x89PNG\r\n\x1a\n"
    assert "png" in ex.results[0].formats()


def test_contexts(sandbox: warden.Sandbox) -> None:
    ctx = sandbox.create_code_context("python", cwd="/tmp")
    assert ctx["id"] in [c["id"] for c in sandbox.code_contexts()]
    sandbox.run_code("y = 5", context_id=ctx["id"])
    assert sandbox.run_code("y * 2", context_id=ctx["id"]).text == "10"
    sandbox.restart_code_context(ctx["id"])
    ex = sandbox.run_code("y", context_id=ctx["id"])
    assert ex.error is not None and ex.error.name == "NameError"
    sandbox.interrupt_code_context(ctx["id"])
    sandbox.delete_code_context(ctx["id"])
    assert ctx["id"] not in [c["id"] for c in sandbox.code_contexts()]
