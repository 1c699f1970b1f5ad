// Warden code-interpreter driver for Java. The agent starts it with the
// JDK's source launcher (java --source 11 <this file>, see driver_java.sh);
// it reads one command per line on fd 3 (fields "x"+hex: the code, then
// the run's environment as name/value pairs) and writes one JSON event per
// line on fd 4. Cells are split into snippets and evaluated by one JShell
// (jdk.jshell) running them in this JVM, so state persists across runs;
// System.out and System.err are the process's fd 1 and 2, which the agent
// streams, closed per run by a sync marker. The value of the cell's last
// snippet, when it is an expression with a value, is the main result, its
// text String.valueOf(value) as IJava shows it.
import java.io.*;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.stream.Collectors;

import jdk.jshell.*;
import jdk.jshell.SourceCodeAnalysis.CompletionInfo;
import jdk.jshell.SourceCodeAnalysis.Completeness;

public class WardenJava {
    static final String KEY = "\u0000warden.value";
    static final byte[] MARK = {0, 0x1b, 'w', 'a', 'r', 'd', 'e', 'n', '-', 's', 'y', 'n', 'c', 0};
    static OutputStream events;
    static volatile JShell shell;
    static volatile boolean running;
    static volatile boolean interrupted;

    static synchronized void send(Object... kv) {
        StringBuilder b = new StringBuilder("{");
        for (int i = 0; i + 1 < kv.length; i += 2) {
            if (i > 0) b.append(',');
            b.append(q((String) kv[i])).append(':');
            Object v = kv[i + 1];
            b.append(v instanceof Boolean ? v.toString() : q(String.valueOf(v)));
        }
        b.append("}\n");
        try {
            events.write(b.toString().getBytes(StandardCharsets.UTF_8));
            events.flush();
        } catch (IOException e) {
            System.exit(0);
        }
    }

    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20 || Character.isSurrogate(c) && !validSurrogate(s, i)) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static boolean validSurrogate(String s, int i) {
        char c = s.charAt(i);
        if (Character.isHighSurrogate(c)) return i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1));
        return i > 0 && Character.isHighSurrogate(s.charAt(i - 1));
    }

    static String unhex(String f) {
        String h = f.substring(1);
        byte[] b = new byte[h.length() / 2];
        for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
        return new String(b, StandardCharsets.UTF_8);
    }

    // The map behind System.getenv(), so that a run's environment shows
    // there (needs --add-opens java.base/java.util); null when not reachable.
    @SuppressWarnings("unchecked")
    static Map<String, String> envMap() {
        try {
            Map<String, String> env = System.getenv();
            Field f = env.getClass().getDeclaredField("m");
            f.setAccessible(true);
            return (Map<String, String>) f.get(env);
        } catch (Throwable t) {
            return null;
        }
    }

    public static void main(String[] args) throws Exception {
        events = new FileOutputStream("/dev/fd/4");
        BufferedReader ctl = new BufferedReader(new InputStreamReader(new FileInputStream("/dev/fd/3"), StandardCharsets.UTF_8));
        try {
            // sun.misc.Signal through reflection: no compiler warning at start.
            Class<?> sig = Class.forName("sun.misc.Signal"), handler = Class.forName("sun.misc.SignalHandler");
            Object h = java.lang.reflect.Proxy.newProxyInstance(handler.getClassLoader(), new Class<?>[] {handler}, (proxy, m, a) -> {
                if (m.getName().equals("handle")) {
                    JShell sh = shell;
                    if (running && sh != null) {
                        interrupted = true;
                        sh.stop();
                    }
                    return null;
                }
                if (m.getName().equals("equals")) return proxy == a[0];
                if (m.getName().equals("hashCode")) return System.identityHashCode(proxy);
                return "WardenSignalHandler";
            });
            sig.getMethod("handle", sig, handler).invoke(null, sig.getConstructor(String.class).newInstance("INT"), h);
        } catch (Throwable t) {
            // No SIGINT handling: an interrupt ends the JVM and the agent restarts it.
        }
        JShell sh;
        try {
            sh = JShell.builder().executionEngine("local").out(System.out).err(System.err).build();
            // Warm up the compiler, so that the first cell is not the slow one.
            sh.eval("1");
        } catch (Throwable t) {
            send("type", "ready", "pid", String.valueOf(ProcessHandle.current().pid()));
            unavailable(ctl, "JShell (module jdk.jshell, a full JDK such as Debian's default-jdk-headless) is not available: " + t);
            return;
        }
        for (Snippet s : sh.snippets().collect(Collectors.toList())) sh.drop(s);
        shell = sh;
        Map<String, String> env = envMap();
        FileOutputStream rawOut = new FileOutputStream(FileDescriptor.out), rawErr = new FileOutputStream(FileDescriptor.err);
        send("type", "ready", "pid", String.valueOf(ProcessHandle.current().pid()));
        String line;
        while ((line = ctl.readLine()) != null) {
            String[] f = line.split(" ");
            Map<String, String> oldEnv = new LinkedHashMap<>(), oldProps = new LinkedHashMap<>();
            try {
                String code = unhex(f[0]);
                for (int i = 1; i + 1 < f.length; i += 2) {
                    String k = unhex(f[i]), v = unhex(f[i + 1]);
                    oldProps.put(k, System.getProperty(k));
                    System.setProperty(k, v);
                    if (env != null) oldEnv.put(k, env.put(k, v));
                }
                run(sh, code);
            } catch (Throwable t) {
                send("type", "error", "name", t.getClass().getName(), "value", String.valueOf(t.getMessage()), "traceback", stack(t));
            } finally {
                for (Map.Entry<String, String> e : oldProps.entrySet()) {
                    if (e.getValue() == null) System.clearProperty(e.getKey());
                    else System.setProperty(e.getKey(), e.getValue());
                }
                if (env != null) {
                    for (Map.Entry<String, String> e : oldEnv.entrySet()) {
                        if (e.getValue() == null) env.remove(e.getKey());
                        else env.put(e.getKey(), e.getValue());
                    }
                }
            }
            System.out.flush();
            System.err.flush();
            rawOut.write(MARK);
            rawOut.flush();
            rawErr.write(MARK);
            rawErr.flush();
            send("type", "done");
        }
        System.exit(0);
    }

    static void unavailable(BufferedReader ctl, String why) throws IOException {
        FileOutputStream rawOut = new FileOutputStream(FileDescriptor.out), rawErr = new FileOutputStream(FileDescriptor.err);
        while (ctl.readLine() != null) {
            send("type", "error", "name", "JavaUnavailable", "value", why, "traceback", "JavaUnavailable: " + why);
            rawOut.write(MARK);
            rawErr.write(MARK);
            send("type", "done");
        }
        System.exit(0);
    }

    static String stack(Throwable t) {
        StringWriter w = new StringWriter();
        t.printStackTrace(new PrintWriter(w));
        return w.toString();
    }

    static void run(JShell sh, String code) {
        SourceCodeAnalysis sca = sh.sourceCodeAnalysis();
        String rest = code;
        Snippet last = null;
        interrupted = false;
        running = true;
        try {
            while (true) {
                CompletionInfo ci = sca.analyzeCompletion(rest);
                if (ci.completeness() == Completeness.EMPTY) break;
                String src;
                if (ci.completeness().isComplete()) {
                    src = ci.source();
                    rest = ci.remaining();
                } else if (ci.completeness() == Completeness.DEFINITELY_INCOMPLETE || ci.completeness() == Completeness.CONSIDERED_INCOMPLETE) {
                    String s = rest.strip();
                    send("type", "error", "name", "CompilationException", "value", "incomplete code: " + s,
                        "traceback", "CompilationException: the cell ends in the middle of a statement:\n" + s);
                    return;
                } else { // UNKNOWN: let the compiler say what is wrong
                    src = rest;
                    rest = "";
                }
                List<SnippetEvent> evs = sh.eval(src);
                last = null;
                for (SnippetEvent e : evs) {
                    if (e.causeSnippet() != null) continue;
                    if (interrupted) {
                        send("type", "error", "name", "KeyboardInterrupt", "value", "interrupted",
                            "traceback", "KeyboardInterrupt: the run was interrupted");
                        return;
                    }
                    if (e.exception() != null) {
                        send(thrown(e.exception()));
                        return;
                    }
                    if (e.status() == Snippet.Status.REJECTED) {
                        String msg = sh.diagnostics(e.snippet()).map(d -> d.getMessage(Locale.ROOT)).collect(Collectors.joining("\n"));
                        if (msg.isEmpty()) msg = "the snippet was rejected";
                        send("type", "error", "name", "CompilationException", "value", msg,
                            "traceback", "CompilationException: " + msg + "\n" + e.snippet().source().strip());
                        return;
                    }
                    if (e.status() == Snippet.Status.RECOVERABLE_DEFINED || e.status() == Snippet.Status.RECOVERABLE_NOT_DEFINED) {
                        String msg = sh.unresolvedDependencies((DeclarationSnippet) e.snippet()).collect(Collectors.joining(", "));
                        System.err.println("Warning: " + e.snippet().source().strip() + " refers to what is not defined yet: " + msg);
                    }
                    last = e.snippet();
                }
            }
            if (last != null) result(sh, last);
        } finally {
            running = false;
        }
    }

    static Object[] thrown(JShellException x) {
        String name = x instanceof EvalException ? ((EvalException) x).getExceptionClassName() : x.getClass().getName();
        String msg = x.getMessage() == null ? "" : x.getMessage();
        if (x instanceof UnresolvedReferenceException) {
            name = "UnresolvedReferenceException";
            msg = "attempted to use " + ((UnresolvedReferenceException) x).getSnippet().source().strip() + ", which refers to what is not defined";
        }
        StringWriter w = new StringWriter();
        w.append(name).append(msg.isEmpty() ? "" : ": " + msg).append('\n');
        for (StackTraceElement el : x.getStackTrace()) {
            if (el.getClassName().startsWith("jdk.jshell.") || el.getClassName().startsWith("java.lang.reflect.") || el.getClassName().startsWith("jdk.internal.")) continue;
            w.append("\tat ").append(el.toString()).append('\n');
        }
        return new Object[] {"type", "error", "name", name, "value", msg, "traceback", w.toString()};
    }

    // result sends the value of an expression snippet: JShell keeps it in a
    // variable; a statement snippet hands it over through the system
    // properties (a map shared with the snippets' class loader).
    static void result(JShell sh, Snippet s) {
        String var = null;
        if (s instanceof VarSnippet && s.subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND) var = ((VarSnippet) s).name();
        else if (s instanceof ExpressionSnippet) var = ((ExpressionSnippet) s).name();
        if (var == null) return;
        if (s instanceof VarSnippet && ((VarSnippet) s).typeName().equals("void")) return;
        Properties p = System.getProperties();
        p.remove(KEY);
        for (SnippetEvent e : sh.eval("{ System.getProperties().put(\"\\u0000warden.value\", (Object) " + var + "); }")) {
            if (e.exception() != null || e.status() == Snippet.Status.REJECTED) return;
            if (e.causeSnippet() == null) sh.drop(e.snippet());
        }
        Object v = p.remove(KEY);
        if (v == null) return;
        String text;
        try {
            text = String.valueOf(v);
        } catch (Throwable t) {
            StringWriter w = new StringWriter();
            w.append(t.toString()).append('\n');
            for (StackTraceElement el : t.getStackTrace()) w.append("\tat ").append(el.toString()).append('\n');
            send("type", "error", "name", t.getClass().getName(), "value", String.valueOf(t.getMessage()), "traceback", w.toString());
            return;
        }
        send("type", "result", "is_main_result", true, "text", text);
    }
}
