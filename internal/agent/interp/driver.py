# Warden code-interpreter driver for Python. The agent starts it as
# `python3 -u -c <this>`; it reads one JSON command per line on fd 3 and
# writes one JSON event per line on fd 4. stdout/stderr of user code are sent
# as events (in order); raw fd 1/2 output (subprocesses) reaches the agent
# through the process's pipes, closed per run by a sync marker.
import ast, base64, builtins, io, json, linecache, os, signal, sys, traceback, types

_ctl = os.fdopen(3, "r", encoding="utf-8")
_evf = 4
_MARK = b"\x00\x1bwarden-sync\x00"
_count = 0


def _send(ev):
    data = (json.dumps(ev, default=str) + "\n").encode("utf-8", "replace")
    while data:
        n = os.write(_evf, data)
        data = data[n:]


class _Stream(io.TextIOBase):
    def __init__(self, name):
        self._name = name

    @property
    def encoding(self):
        return "utf-8"

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return 1 if self._name == "stdout" else 2

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        if s:
            _send({"type": self._name, "text": s})
        return len(s)

    def flush(self):
        pass


_MIME = [
    ("_repr_html_", "html"),
    ("_repr_markdown_", "markdown"),
    ("_repr_svg_", "svg"),
    ("_repr_png_", "png"),
    ("_repr_jpeg_", "jpeg"),
    ("_repr_latex_", "latex"),
    ("_repr_json_", "json"),
    ("_repr_javascript_", "javascript"),
    ("_repr_pdf_", "pdf"),
]
_MIMEKEYS = {
    "text/plain": "text", "text/html": "html", "text/markdown": "markdown",
    "image/svg+xml": "svg", "image/png": "png", "image/jpeg": "jpeg",
    "text/latex": "latex", "application/json": "json",
    "application/javascript": "javascript", "application/pdf": "pdf",
}


def _enc(key, v):
    if isinstance(v, tuple) and len(v) == 2:
        v = v[0]
    if isinstance(v, (bytes, bytearray)):
        if key in ("png", "jpeg", "pdf"):
            return base64.b64encode(bytes(v)).decode("ascii")
        return bytes(v).decode("utf-8", "replace")
    if key in ("png", "jpeg", "pdf") and isinstance(v, str):
        return v
    return v


def _figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _bundle(obj):
    d = {}
    if not isinstance(obj, type):
        mb = getattr(obj, "_repr_mimebundle_", None)
        if callable(mb):
            try:
                r = mb()
                if isinstance(r, tuple):
                    r = r[0]
                for k, v in (r or {}).items():
                    key = _MIMEKEYS.get(k, k)
                    d[key] = _enc(key, v)
            except Exception:
                pass
        for meth, key in _MIME:
            f = getattr(obj, meth, None)
            if key in d or not callable(f):
                continue
            try:
                v = f()
            except Exception:
                continue
            if v is not None:
                d[key] = _enc(key, v)
        mpl = sys.modules.get("matplotlib.figure")
        if mpl is not None and isinstance(obj, mpl.Figure) and "png" not in d:
            d["png"] = _figure_png(obj)
    if "text" not in d:
        try:
            d["text"] = repr(obj)
        except Exception as e:
            d["text"] = "<repr failed: %r>" % e
    return d


def display(*objs, **kw):
    for o in objs:
        ev = _bundle(o)
        ev.update(type="result", is_main_result=False)
        _send(ev)


builtins.display = display


def _flush_figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        for num in plt.get_fignums():
            fig = plt.figure(num)
            ev = {"type": "result", "is_main_result": False, "png": _figure_png(fig),
                  "text": repr(fig)}
            _send(ev)
        plt.close("all")
    except Exception as e:
        sys.stderr.write("warden: could not render figures: %r\n" % e)


def _show(*a, **kw):
    _flush_figures()


def _patch_pyplot():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None and getattr(plt.show, "__name__", "") != "_show":
        plt.show = _show


_globals = {"__name__": "__main__", "__builtins__": builtins, "display": display}
_loop = None


def _run_coro(c):
    global _loop
    import asyncio
    if _loop is None:
        _loop = asyncio.new_event_loop()
    return _loop.run_until_complete(c)


def _eval(code_obj):
    r = eval(code_obj, _globals)
    if isinstance(r, types.CoroutineType):
        r = _run_coro(r)
    return r


def _run(code):
    global _count
    _count += 1
    fname = "<cell-%d>" % _count
    linecache.cache[fname] = (len(code), None, code.splitlines(True), fname)
    flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
    tree = ast.parse(code, fname, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    _eval(compile(tree, fname, "exec", flags=flags))
    _patch_pyplot()
    if last is not None:
        v = _eval(compile(last, fname, "eval", flags=flags))
        if v is not None:
            builtins._ = v
            _globals["_"] = v
            mpl = sys.modules.get("matplotlib.figure")
            if mpl is not None and isinstance(v, mpl.Figure):
                import matplotlib.pyplot as plt
                plt.close(v)
            ev = _bundle(v)
            ev.update(type="result", is_main_result=True)
            _send(ev)


def _error(e):
    tb = e.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
        tb = tb.tb_next
    if isinstance(e, SyntaxError):
        tb = None
    lines = traceback.format_exception(type(e), e, tb)
    _send({"type": "error", "name": type(e).__name__, "value": str(e),
           "traceback": "".join(lines)})


def main():
    sys.stdout = _Stream("stdout")
    sys.stderr = _Stream("stderr")
    os.environ.setdefault("MPLBACKEND", "Agg")
    # Debian's matplotlib reads /etc/matplotlibrc, which a sandbox's own /etc
    # may lack: fall back to the copy in the package's data directory.
    _rc = "/usr/share/matplotlib/mpl-data/matplotlibrc"
    if "MATPLOTLIBRC" not in os.environ and not os.path.exists("/etc/matplotlibrc") and os.path.exists(_rc):
        os.environ["MATPLOTLIBRC"] = _rc
    _send({"type": "ready", "pid": os.getpid()})
    while True:
        try:
            line = _ctl.readline()
        except KeyboardInterrupt:
            continue
        if not line:
            return
        cmd = {}
        try:
            cmd = json.loads(line)
            saved = {}
            for k, v in (cmd.get("env") or {}).items():
                saved[k] = os.environ.get(k)
                os.environ[k] = v
            try:
                _run(cmd.get("code", ""))
            except KeyboardInterrupt as e:
                _error(e)
            except BaseException as e:  # SystemExit too: the context lives on
                _error(e)
            try:
                _flush_figures()
            except BaseException:
                pass
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        except KeyboardInterrupt:
            pass
        try:
            os.write(1, _MARK)
            os.write(2, _MARK)
        except OSError:
            pass
        while True:
            try:
                _send({"type": "done", "id": cmd.get("id")})
                break
            except KeyboardInterrupt:
                continue


main()
