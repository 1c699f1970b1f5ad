# Starts the Java driver: $1 is its source, $2 a tag of that source. It is
# compiled once per user into ${XDG_CACHE_HOME:-$HOME/.cache}/warden/java-$2
# (a JVM then starts in about a third of the time a source launch takes);
# where that cannot be written, the JDK's source launcher runs it from a
# private temporary file, opened on fd 5 and removed at once. C1 only and
# the serial collector and a small initial heap: a JVM that starts fast
# and stays small (about 80 MB resident); java.util
# is opened so that a run's env shows in System.getenv().
if ! command -v java >/dev/null 2>&1; then
  printf '{"type":"unavailable","value":"Java is not installed in this sandbox (Debian'"'"'s default-jdk-headless provides it)"}\n' >&4
  exit 127
fi
opts="-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xms16m -Xshare:auto --add-opens java.base/java.util=ALL-UNNAMED"
cache=${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}
dir=${cache:-/nonexistent}/warden/java-$2
if [ -n "$cache" ] && [ ! -f "$dir/WardenJava.class" ] && command -v javac >/dev/null 2>&1 && mkdir -p "${dir%/*}" 2>/dev/null &&
  tmp=$(mktemp -d "${dir%/*}/.java-XXXXXX" 2>/dev/null); then
  printf '%s' "$1" >"$tmp/WardenJava.java" &&
    javac -nowarn -J-XX:+UseSerialGC -J-XX:TieredStopAtLevel=1 -J-Xms16m -d "$tmp" "$tmp/WardenJava.java" >/dev/null 2>&1 &&
    rm -f "$tmp/WardenJava.java" && mv -T "$tmp" "$dir" 2>/dev/null
  rm -rf "$tmp"
fi
# Only a cache of this user's own making is used.
if [ -f "$dir/WardenJava.class" ] && [ -O "$dir" ] && [ -O "$dir/WardenJava.class" ]; then
  # shellcheck disable=SC2086
  exec java $opts -cp "$dir" WardenJava
fi
f=$(mktemp "${TMPDIR:-/tmp}/warden-java-XXXXXX") || exit 1
printf '%s' "$1" >"$f" && exec 5<"$f"
rc=$?
rm -f "$f"
[ "$rc" = 0 ] || exit 1
# shellcheck disable=SC2086
exec java $opts --source 11 /dev/fd/5
