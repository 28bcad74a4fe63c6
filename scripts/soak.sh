#!/usr/bin/env bash
# Soak: the echo example under 1,000 closed-loop connections with random message sizes
# (1 B .. 64 KiB), every byte verified by echo-load, for a long stretch. The server's RSS,
# open fds and CPU are sampled every second from /proc/<pid>. Fails if any byte differs or
# any connection errors, if memory grows after warm-up, if the fd count does not come back
# to its idle value once the clients are gone, or if the server does not exit cleanly on
# SIGTERM.
#
#   scripts/soak.sh [--duration SECS] [--conns N] [--backend uring|epoll] [--port P]
#                   [--out DIR] [--growth-max-kib K]
#
# Defaults: 600 s, 1,000 connections, uring, port 7399, samples in a temp dir. CI runs
# `scripts/soak.sh --duration 30`. Memory is "flat" when the highest RSS of the last fifth
# of the run is at most --growth-max-kib (default 8192) above the highest RSS of the
# second fifth of the samples (the first fifth is warm-up: pools and buffers filling).
set -euo pipefail
cd "$(dirname "$0")/.."

duration=600 conns=1000 backend=uring port=7399 out="" growth_max_kib=8192
while [ $# -gt 0 ]; do
    case "$1" in
        --duration) duration=$2 ;;
        --conns) conns=$2 ;;
        --backend) backend=$2 ;;
        --port) port=$2 ;;
        --out) out=$2 ;;
        --growth-max-kib) growth_max_kib=$2 ;;
        *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift 2
done
out=${out:-$(mktemp -d)}
mkdir -p "$out"
bin=${CARGO_TARGET_DIR:-target}/release

cargo build --quiet --release --example echo -p ring-rt
cargo build --quiet --release -p ring-bench --bin echo-load

"$bin/examples/echo" --addr "127.0.0.1:$port" --backend "$backend" >"$out/server.log" 2>&1 &
server=$!
trap 'kill -KILL "$server" 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$out/server.log" && break; sleep 0.1; done
grep -q listening "$out/server.log" || { cat "$out/server.log"; exit 1; }
head -1 "$out/server.log"

# About once a second: seconds since the load started, VmRSS (KiB), open fds, CPU ticks
# (utime + stime).
sample() {
    local start=$SECONDS
    echo "t_s,rss_kib,fds,cpu_ticks" >"$out/samples.csv"
    while kill -0 "$server" 2>/dev/null; do
        local rss fds cpu
        rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$server/status" 2>/dev/null) || break
        fds=$(find "/proc/$server/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
        cpu=$(awk '{print $14 + $15}' "/proc/$server/stat" 2>/dev/null) || break
        echo "$((SECONDS - start)),$rss,$fds,$cpu" >>"$out/samples.csv"
        sleep 1
    done
}
sleep 0.5
fds_idle=$(find "/proc/$server/fd" -mindepth 1 -maxdepth 1 | wc -l)
sample &
sampler=$!

load_rc=0
"$bin/echo-load" --addr "127.0.0.1:$port" --conns "$conns" --len 1 --len-max 65536 \
    --duration "$duration" --json >"$out/load.json" || load_rc=$?
sleep 3 # idle: the server should be back to its idle fd count
fds_after=$(find "/proc/$server/fd" -mindepth 1 -maxdepth 1 | wc -l)
kill -TERM "$server"
server_rc=0
wait "$server" || server_rc=$?
trap - EXIT
wait "$sampler" 2>/dev/null || true

echo "load: $(cat "$out/load.json")"
verdict=$(awk -F, -v dur="$duration" -v max="$growth_max_kib" '
    # Only samples taken while the load ran: t < duration.
    BEGIN { n = 0 }
    NR == 1 || $1 >= dur { next }
    { t[n] = $1; rss[n] = $2; fds[n] = $3; cpu[n] = $4; n++ }
    END {
        fifth = int(n / 5); if (fifth < 1) fifth = 1
        for (i = 0; i < n; i++) {
            if (i >= fifth && i < 2 * fifth && rss[i] > warm) warm = rss[i]
            if (i >= n - fifth && rss[i] > end) end = rss[i]
            if (rss[i] > peak) peak = rss[i]
            if (fds[i] > fdpeak) fdpeak = fds[i]
        }
        secs = t[n - 1] - t[0]; if (secs < 1) secs = 1
        cpu_s = (cpu[n - 1] - cpu[0]) / 100
        growth = end - warm
        printf "%d samples over %d s; RSS KiB: start %d, warm %d, end %d, peak %d, growth %d (max %d); ", n, secs, rss[0], warm, end, peak, growth, max
        printf "fds peak %d; server CPU %.1f s (%.0f%% of one core)\n", fdpeak, cpu_s, 100 * cpu_s / secs
        exit (growth > max) ? 1 : 0
    }' "$out/samples.csv") && mem_ok=1 || mem_ok=0
echo "memory: $verdict"
echo "fds: idle $fds_idle, after the load $fds_after; server exit $server_rc; samples in $out/samples.csv"

status=0
[ "$load_rc" -eq 0 ] || { echo "soak: FAIL: echo-load reported errors or mismatches (exit $load_rc)"; status=1; }
[ "$mem_ok" -eq 1 ] || { echo "soak: FAIL: RSS grew after warm-up"; status=1; }
[ "$fds_after" -eq "$fds_idle" ] || { echo "soak: FAIL: server fds $fds_idle -> $fds_after after the load"; status=1; }
[ "$server_rc" -eq 0 ] || { echo "soak: FAIL: server exited $server_rc on SIGTERM"; status=1; }
[ "$status" -eq 0 ] && echo "soak: ok ($backend, $conns conns, ${duration}s)"
exit "$status"
