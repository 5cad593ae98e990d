#!/usr/bin/env bash
# tests/integration/test_client_pkgconfig.sh — libsluice as an application
# sees it: `make install PREFIX=TMP`, then examples/client/main.c built with
# nothing but `pkg-config --cflags --libs sluice` (shared, and static with
# --static), run against a real `bin/sluice serve`. Also checks that the
# shared library exports only sl_client_* and carries its soname.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  [[ -f $tmp/server.log ]] && tail -n 20 "$tmp/server.log" >&2
  exit 1
}

make -s install PREFIX="$tmp/usr" >/dev/null || fail "make install"
for f in include/sluice.h lib/libsluice.a lib/libsluice.so lib/libsluice.so.0 \
         lib/pkgconfig/sluice.pc; do
  [[ -e $tmp/usr/$f ]] || fail "make install did not install $f"
done
export PKG_CONFIG_PATH=$tmp/usr/lib/pkgconfig
[[ $(pkg-config --variable=prefix sluice) == "$tmp/usr" ]] || fail "prefix in sluice.pc"
[[ " $(pkg-config --cflags sluice) " == *" -I$tmp/usr/include "* ]] \
  || fail "cflags: $(pkg-config --cflags sluice)"

# Only the public API leaves the shared library.
other=$(nm -D --defined-only "$tmp/usr/lib/libsluice.so" | awk '{print $3}' \
        | grep -v '^sl_client_' || true)
[[ -z $other ]] || fail "libsluice.so exports more than sl_client_*: $other"
nm -D --defined-only "$tmp/usr/lib/libsluice.so" | grep ' T sl_client_send$' >/dev/null \
  || fail "libsluice.so does not export sl_client_send"
objdump -p "$tmp/usr/lib/libsluice.so" | grep 'SONAME *libsluice.so.0$' >/dev/null || fail "soname"

# Shared: the example finds the header and the library through pkg-config only.
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/ex-shared" examples/client/main.c \
  $(pkg-config --cflags --libs sluice) -pthread || fail "shared build"
objdump -p "$tmp/ex-shared" | grep 'NEEDED *libsluice.so.0' >/dev/null \
  || fail "shared build not linked to libsluice.so.0"

# Static: the archive itself, with the private dependencies pkg-config --static adds.
libs=$(pkg-config --static --libs sluice | sed 's/ -lsluice / /; s/^-lsluice //; s/ -lsluice$//')
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/ex-static" examples/client/main.c \
  $(pkg-config --cflags sluice) "$(pkg-config --variable=libdir sluice)/libsluice.a" $libs \
  || fail "static build"
objdump -p "$tmp/ex-static" | grep 'NEEDED *libsluice' >/dev/null && fail "static build needs libsluice.so"

# Both run against a server, on a random free port (another try if it was taken).
up=
for _ in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 40000))
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue # in use
  ./bin/sluice serve --data "$tmp/data" --listen "127.0.0.1:$port" >"$tmp/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do
    curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && up=1 && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  [[ -n $up ]] && break
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=
done
[[ -n $up ]] || fail "the server did not start"
out=$(LD_LIBRARY_PATH=$tmp/usr/lib "$tmp/ex-shared" "http://127.0.0.1:$port" ex 4 250) \
  || fail "shared example: $out"
grep -q '1000 delivered, 0 failed' <<<"$out" || fail "shared example said: $out"
out=$("$tmp/ex-static" "http://127.0.0.1:$port" ex 2 100) || fail "static example: $out"
grep -q '200 delivered, 0 failed' <<<"$out" || fail "static example said: $out"
n=$(curl -fs "http://127.0.0.1:$port/v1/sets/ex" | grep -o '"events":[0-9]*' | cut -d: -f2)
[[ $n == 1200 ]] || fail "the set holds $n events, want 1200"
echo ok
