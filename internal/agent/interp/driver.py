# Warden code-interpreter driver for Python. The agent starts it as
# `python3 -u -c <this>`; it reads one JSON command per line on fd 3 and
# writes one JSON event per line on fd 4. stdout/stderr of user code are sent
# as events (in order); raw fd 1/2 output (subprocesses) reaches the agent
# through the process's pipes, closed per run by a sync marker.
import ast, base64, builtins, importlib.abc, io, json, linecache, math, os, re, signal, subprocess, sys, textwrap, threading, time, traceback, types

_ctl = os.fdopen(3, "r", encoding="utf-8")
_evf = 4
_MARK = b"\x00\x1bwarden-sync\x00"
_count = 0


_lock = threading.RLock()


def _write(ev):
    data = (json.dumps(ev, default=_jsonable) + "\n").encode("utf-8", "replace")
    while data:
        n = os.write(_evf, data)
        data = data[n:]


def _send(ev):
    # Buffered stream text goes first, so events keep their order.
    with _lock:
        for s in _streams:
            if s is not ev.get("_from"):
                s._flush()
        ev.pop("_from", None)
        _write(ev)


def _jsonable(v):
    """JSON for what json.dumps does not know: numpy scalars and arrays,
    timestamps, NaN (as null, in the containers _clean walks)."""
    item = getattr(v, "item", None)
    if callable(item) and type(v).__module__ == "numpy":
        try:
            return item()
        except Exception:
            pass
    tolist = getattr(v, "tolist", None)
    if callable(tolist):
        try:
            return tolist()
        except Exception:
            pass
    iso = getattr(v, "isoformat", None)
    if callable(iso):
        try:
            return iso()
        except Exception:
            pass
    return str(v)


def _clean(v):
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, (str, int, bool)) or v is None:
        return v
    if isinstance(v, float):
        return v
    return _clean(_jsonable(v))


_streams = []
_FLUSH_EVERY = 0.2  # seconds, as ipykernel's IOPub batching


class _Stream(io.TextIOBase):
    """sys.stdout/sys.stderr of user code. Text is batched as ipykernel
    batches it: one print is one message; a partial line goes out after
    _FLUSH_EVERY, or before any other event, or at the end of the run."""

    def __init__(self, name):
        self._name = name
        self._buf = []
        self._since = 0.0
        _streams.append(self)

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
            with _lock:
                for o in _streams:  # keep stdout and stderr in order
                    if o is not self:
                        o._flush()
                if not self._buf:
                    self._since = time.monotonic()
                self._buf.append(s)
                if s.endswith("\n") and time.monotonic() - self._since >= _FLUSH_EVERY:
                    self._flush()
        return len(s)

    def _flush(self):
        with _lock:
            if self._buf:
                text, self._buf = "".join(self._buf), []
                _write({"type": self._name, "text": text})

    def flush(self):
        pass


def _flusher():
    while True:
        time.sleep(_FLUSH_EVERY / 2)
        try:
            with _lock:
                for s in _streams:
                    if s._buf and time.monotonic() - s._since >= _FLUSH_EVERY:
                        s._flush()
        except Exception:
            pass


def _flush_streams():
    with _lock:
        for s in _streams:
            s._flush()


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
        if mpl is not None and isinstance(obj, mpl.Figure):
            if "png" not in d:
                d["png"] = _figure_png(obj)
            ch = _chart(obj)
            if ch is not None:
                d["chart"] = ch
        pd = sys.modules.get("pandas")
        if pd is not None and isinstance(obj, pd.DataFrame):
            try:
                d["data"] = _clean(obj.to_dict(orient="list"))
            except Exception:
                pass
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
            ch = _chart(fig)
            if ch is not None:
                ev["chart"] = ch
            _send(ev)
        plt.close("all")
    except Exception as e:
        sys.stderr.write("warden: could not render figures: %r\n" % e)


def _show(*a, **kw):
    _flush_figures()


# Structured chart data of a matplotlib figure, in the shape of E2B's
# e2b/chart (the @e2b/code-interpreter SDK's Chart types): one axes gives
# one chart, several give a "superchart" whose elements are the charts.
_UNIT = re.compile(r"^(.*?)\s*[\(\[]([^\)\]]+)[\)\]]\s*$")


def _label_unit(label):
    label = label or ""
    m = _UNIT.match(label)
    if m:
        return label, m.group(2)
    return label, None


def _axis_info(ax, which):
    axis = ax.xaxis if which == "x" else ax.yaxis
    scale = ax.get_xscale() if which == "x" else ax.get_yscale()
    ticks = list(ax.get_xticks() if which == "x" else ax.get_yticks())
    labels = [t.get_text() for t in (ax.get_xticklabels() if which == "x" else ax.get_yticklabels())]
    try:
        import matplotlib.dates as mdates
        import matplotlib.category as mcat
        if isinstance(axis.get_major_formatter(), (mdates.AutoDateFormatter, mdates.DateFormatter, mdates.ConciseDateFormatter)):
            scale = "datetime"
            ticks = [mdates.num2date(t).isoformat() for t in ticks]
        elif isinstance(getattr(axis, "units", None), mcat.UnitData):
            scale = "categorical"
            ticks = labels
    except Exception:
        pass
    return ticks, labels, scale


def _convert(ax, which, values):
    axis = ax.xaxis if which == "x" else ax.yaxis
    out = []
    try:
        import matplotlib.dates as mdates
        import matplotlib.category as mcat
        units = getattr(axis, "units", None)
        if isinstance(units, mcat.UnitData):
            inv = {v: k for k, v in units._mapping.items()}
            return [inv.get(v, v) for v in values]
        if isinstance(axis.get_major_formatter(), (mdates.AutoDateFormatter, mdates.DateFormatter, mdates.ConciseDateFormatter)):
            return [mdates.num2date(v).isoformat() if isinstance(v, (int, float)) else _jsonable(v) for v in values]
    except Exception:
        pass
    for v in values:
        out.append(v if isinstance(v, (int, float, str)) else _jsonable(v))
    return out


def _chart2d(ax, kind, elements, points=False):
    xl, xu = _label_unit(ax.get_xlabel())
    yl, yu = _label_unit(ax.get_ylabel())
    c = {"type": kind, "title": ax.get_title(), "x_label": xl, "y_label": yl,
         "x_unit": xu, "y_unit": yu, "elements": elements}
    if points:
        xt, xtl, xs = _axis_info(ax, "x")
        yt, ytl, ys = _axis_info(ax, "y")
        c.update(x_ticks=xt, x_tick_labels=xtl, x_scale=xs, y_ticks=yt, y_tick_labels=ytl, y_scale=ys)
    return c


def _axes_chart(ax):
    from matplotlib.patches import Wedge, Rectangle
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer
    title = ax.get_title()
    box = getattr(ax, "_warden_box", None)
    if box:
        return _chart2d(ax, "box_and_whisker", [dict(e) for e in box])
    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    if wedges:
        labels = [t.get_text() for t in ax.texts]
        els = []
        for i, w in enumerate(wedges):
            lab = w.get_label()
            if (not lab or lab.startswith("_")) and i < len(labels):
                lab = labels[i]
            els.append({"label": lab, "angle": abs(w.theta2 - w.theta1), "radius": w.r})
        return {"type": "pie", "title": title, "elements": els}
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    if bars:
        els = []
        ticks = {}
        for t, lab in zip(ax.get_xticks(), ax.get_xticklabels()):
            ticks[round(float(t), 6)] = lab.get_text()
        for ci, c in enumerate(bars):
            group = c.get_label()
            if not group or group.startswith("_"):
                group = str(ci)
            for r in c.patches:
                x = r.get_x() + r.get_width() / 2
                lab = ticks.get(round(float(x), 6))
                if lab is None:
                    lab = str(_convert(ax, "x", [x])[0])
                els.append({"label": lab, "value": r.get_height(), "group": group})
        return _chart2d(ax, "bar", els)
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    if scatters:
        els = []
        for c in scatters:
            off = c.get_offsets()
            xs = _convert(ax, "x", [float(p[0]) for p in off])
            ys = _convert(ax, "y", [float(p[1]) for p in off])
            els.append({"label": c.get_label(), "points": [list(p) for p in zip(xs, ys)]})
        return _chart2d(ax, "scatter", els, points=True)
    lines = [l for l in ax.get_lines() if not l.get_label().startswith("_child") or len(l.get_xdata()) > 0]
    if lines:
        els = []
        for l in lines:
            xs = _convert(ax, "x", list(l.get_xdata(orig=False)))
            ys = _convert(ax, "y", list(l.get_ydata(orig=False)))
            els.append({"label": l.get_label(), "points": [list(p) for p in zip(xs, ys)]})
        return _chart2d(ax, "line", els, points=True)
    return None


def _chart(fig):
    try:
        charts = [c for c in (_axes_chart(ax) for ax in fig.get_axes()) if c is not None]
        if not charts:
            return None
        if len(charts) == 1:
            return _clean(charts[0])
        sup = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
        return _clean({"type": "superchart", "title": sup, "elements": charts})
    except Exception as e:
        sys.stderr.write("warden: could not extract chart data: %r\n" % e)
        return None


def _patch_boxplot(mod):
    Axes = getattr(mod, "Axes", None)
    if Axes is None or getattr(Axes.boxplot, "_warden", False):
        return
    orig = Axes.boxplot

    def boxplot(self, x, *a, **kw):
        r = orig(self, x, *a, **kw)
        try:
            from matplotlib import cbook, rcParams
            whis = kw.get("whis")
            if whis is None:
                whis = rcParams["boxplot.whiskers"]
            labels = kw.get("labels") or kw.get("tick_labels")
            stats = cbook.boxplot_stats(x, whis=whis, labels=labels)
            els = []
            for i, st in enumerate(stats):
                els.append({"label": str(st.get("label", i + 1)), "min": st["whislo"],
                            "first_quartile": st["q1"], "median": st["med"],
                            "third_quartile": st["q3"], "max": st["whishi"],
                            "outliers": list(st["fliers"])})
            self._warden_box = getattr(self, "_warden_box", []) + els
        except Exception:
            pass
        return r

    boxplot._warden = True
    boxplot.__doc__ = orig.__doc__
    Axes.boxplot = boxplot


def _patch_pil(mod):
    Image = getattr(mod, "Image", None)
    if Image is None or getattr(Image.show, "_warden", False):
        return

    def show(self, *a, **kw):
        display(self)

    show._warden = True
    Image.show = show


def _patch_pyplot_mod(mod):
    if getattr(mod.show, "__name__", "") != "_show":
        mod.show = _show


_HOOKS = {"matplotlib.axes": _patch_boxplot, "PIL.Image": _patch_pil,
          "matplotlib.pyplot": _patch_pyplot_mod}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, hook):
        self._inner, self._hook = inner, hook

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        try:
            self._hook(module)
        except Exception:
            pass


class _Finder(importlib.abc.MetaPathFinder):
    """Patches modules as they are imported (pyplot's show, PIL's
    Image.show, Axes.boxplot), whatever the cell imports them with."""

    def find_spec(self, name, path=None, target=None):
        hook = _HOOKS.get(name)
        if hook is None:
            return None
        for f in sys.meta_path:
            if f is self or not hasattr(f, "find_spec"):
                continue
            spec = f.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, hook)
                return spec
        return None


def _patch_loaded():
    for name, hook in _HOOKS.items():
        mod = sys.modules.get(name)
        if mod is not None:
            try:
                hook(mod)
            except Exception:
                pass


# IPython's input transformations that a cell may rely on: leading
# indentation is removed, and `!cmd` / `x = !cmd` lines run shell commands
# ({expr} and $name expanded from the namespace), `%cd`, `%env` and `%pip`.
_BANG = re.compile(r"^(\s*)(?:([A-Za-z_][\w.]*)\s*=\s*)?!(?!=)(.*)$")
_MAGIC = re.compile(r"^(\s*)%(cd|pip|env)\b(.*)$")


def _expand(cmd):
    def brace(m):
        try:
            return str(eval(m.group(1), _globals))
        except Exception:
            return m.group(0)

    def dollar(m):
        if m.group(1) in _globals:
            return str(_globals[m.group(1)])
        return m.group(0)

    cmd = re.sub(r"(?<!\{)\{([^{}]+)\}(?!\})", brace, cmd)
    return re.sub(r"(?<!\$)\$([A-Za-z_]\w*)", dollar, cmd).replace("$$", "$")


class _SList(list):
    """What `x = !cmd` returns (IPython's SList, simplified)."""

    @property
    def s(self):
        return " ".join(self)

    @property
    def n(self):
        return "\n".join(self)

    def __str__(self):
        return self.n


def _system(cmd, capture=False):
    cmd = _expand(cmd)
    sys.stdout.flush()
    p = subprocess.Popen(["/bin/sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    lines = []
    try:
        for raw in iter(p.stdout.readline, b""):
            line = raw.decode("utf-8", "replace")
            if capture:
                lines.append(line.rstrip("\n"))
            else:
                sys.stdout.write(line)
        p.wait()
    except KeyboardInterrupt:
        p.kill()
        p.wait()
        raise
    finally:
        p.stdout.close()
    _globals["_exit_code"] = p.returncode
    if capture:
        return _SList(lines)
    return None


def _magic(name, arg):
    arg = _expand(arg.strip())
    if name == "cd":
        os.chdir(os.path.expanduser(arg or "~"))
        print(os.getcwd())
    elif name == "pip":
        _system(sys.executable + " -m pip " + arg)
    elif name == "env":
        if "=" in arg:
            k, v = arg.split("=", 1)
            os.environ[k.strip()] = v.strip()
        elif arg:
            print(os.environ.get(arg, ""))
        else:
            return dict(os.environ)


def _transform(code, fname):
    try:
        return ast.parse(code, fname, "exec")
    except SyntaxError as first:
        out = []
        for line in textwrap.dedent(code).split("\n"):
            m = _BANG.match(line)
            if m and not line.lstrip().startswith("!="):
                ind, var, cmd = m.groups()
                call = "_warden_system(%r, %s)" % (cmd.strip(), "True" if var else "False")
                out.append(ind + (var + " = " if var else "") + call)
                continue
            m = _MAGIC.match(line)
            if m:
                out.append("%s_warden_magic(%r, %r)" % (m.group(1), m.group(2), m.group(3)))
                continue
            out.append(line)
        new = "\n".join(out)
        if new == code:
            raise first
        try:
            tree = ast.parse(new, fname, "exec")
        except SyntaxError:
            raise first
        linecache.cache[fname] = (len(new), None, new.splitlines(True), fname)
        return tree


_globals = {"__name__": "__main__", "__builtins__": builtins, "display": display,
            "_warden_system": _system, "_warden_magic": _magic}
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
    tree = _transform(code, fname)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    _eval(compile(tree, fname, "exec", flags=flags))
    _patch_loaded()
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
    threading.Thread(target=_flusher, daemon=True).start()
    sys.meta_path.insert(0, _Finder())
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
            try:
                _flush_streams()
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
