#!/usr/bin/env bash
# wrk against the hyper HTTP/1.1 server on ring-rt (examples/hyper.rs, uring and epoll
# backends) and on tokio (src/bin/tokio-hyper.rs, current_thread). Every server runs one
# thread pinned to CPU 0, wrk one thread pinned to CPU 1. Per run: requests/s, latency
# p50/p99, transfer/s, and server CPU time per request from /proc/<pid>/stat. Small
# responses (`/`) at each of CONNS connections, and bodies of each of BIG_SIZES bytes
# (`/big?n=SIZE`) at BIG_CONNS connections. ROUNDS rounds, the servers interleaved round by
# round (each round starts each server afresh, and one server later than the round before);
# the summary gives medians with min..max.
#
# ROUNDS=3 DURATION=10 CONNS="1 50 200" BIG_SIZES="1024 16384 65536 1048576 16777216" \
#     BIG_CONNS=50 PORT=8080 crates/ring-bench/scripts/wrk-hyper.sh
#
# BASELINE_HYPER=path/to/another/build/examples/hyper adds that build's uring and epoll
# servers to every round ("baseline uring", "baseline epoll"), interleaved with the others:
# a change measured side by side against the build before it.
#
# Writes the markdown tables to stdout and to $CARGO_TARGET_DIR/wrk-hyper/wrk.md
# (default target/wrk-hyper/wrk.md).
set -euo pipefail

root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"

DURATION=${DURATION:-10}
CONNS=${CONNS:-"1 50 200"}
PORT=${PORT:-8080}
BIG_SIZES=${BIG_SIZES:-"1024 16384 65536 1048576 16777216"}
BIG_CONNS=${BIG_CONNS:-50}
ROUNDS=${ROUNDS:-3}
target=${CARGO_TARGET_DIR:-$root/target}
out_dir=$root/target/wrk-hyper
addr=127.0.0.1:$PORT
clk_tck=$(getconf CLK_TCK)

server_pid=""
log_dir=$(mktemp -d)

die() {
    echo "wrk-hyper: $*" >&2
    exit 1
}

cleanup() {
    if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill -KILL "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$log_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

need_wrk() {
    command -v wrk >/dev/null && return
    echo "wrk-hyper: installing wrk" >&2
    apt-get install -y wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y wrk >/dev/null; }
    command -v wrk >/dev/null || die "wrk is not installed and apt-get could not install it"
}

build() {
    echo "wrk-hyper: building both servers (release)" >&2
    cargo build --release -q -p ring-rt --example hyper --features tokio-io,hyper
    cargo build --release -q -p ring-bench --bin tokio-hyper
}

# True while something listens on $PORT.
is_port_listening() {
    [[ -n $(ss -Htln "sport = :$PORT") ]]
}

wait_port_free() {
    for _ in $(seq 300); do
        is_port_listening || return 0
        sleep 0.1
    done
    die "port $PORT still has a listener after 30 s (ss -tlnp shows whose)"
}

# start NAME CMD...: runs the server on CPU 0 and waits (30 s at most) until it listens.
start() {
    local name=$1 log="$log_dir/${1// /-}.log"
    shift
    wait_port_free
    # Created before the server starts, so the first grep finds a file.
    : >"$log"
    taskset -c 0 "$@" >"$log" 2>&1 &
    server_pid=$!
    for _ in $(seq 300); do
        kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; die "$name exited during startup"; }
        if grep -q listening "$log" && is_port_listening; then
            echo "wrk-hyper: $(head -1 "$log") pid=$server_pid" >&2
            return
        fi
        sleep 0.1
    done
    cat "$log" >&2
    die "$name did not start listening on $addr within 30 s"
}

# Stops the server with SIGTERM (SIGKILL after 10 s) and waits until the port is free.
stop() {
    kill -TERM "$server_pid"
    for _ in $(seq 100); do
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$server_pid" 2>/dev/null && { echo "wrk-hyper: SIGTERM ignored, killing" >&2; kill -KILL "$server_pid"; }
    local status=0
    wait "$server_pid" || status=$?
    [[ $status -eq 0 ]] || echo "wrk-hyper: server exited with status $status" >&2
    server_pid=""
    wait_port_free
}

# utime+stime of the server, in clock ticks (fields 14 and 15; the name in field 2 has no
# spaces here, so splitting on whitespace is safe).
cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$server_pid/stat"
}

# Converts wrk's "123.45us" / "1.20ms" / "2.00s" to microseconds.
to_us() {
    awk -v t="$1" 'BEGIN {
        v = t + 0
        if (t ~ /us$/) m = 1; else if (t ~ /ms$/) m = 1000; else if (t ~ /m$/) m = 60e6; else if (t ~ /s$/) m = 1e6; else m = 1
        printf "%.0f", v * m
    }'
}

# measure SERVER CONNS PATH: one wrk run; appends a table row.
measure() {
    local server=$1 conns=$2 path=$3 before after out
    before=$(cpu_ticks)
    out=$(taskset -c 1 wrk -t1 -c"$conns" -d"${DURATION}s" --latency "http://$addr$path")
    after=$(cpu_ticks)
    kill -0 "$server_pid" 2>/dev/null || die "$server died during the run"
    local rps transfer p50 p99 requests errors cpu_us
    rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    transfer=$(awk '/^Transfer\/sec:/ { print $2 }' <<<"$out")
    p50=$(awk '$1 == "50%" { print $2 }' <<<"$out")
    p99=$(awk '$1 == "99%" { print $2 }' <<<"$out")
    requests=$(awk '/requests in/ { print $1 }' <<<"$out")
    errors=$(awk '/Socket errors|Non-2xx/ { sub(/^ */, ""); printf "%s; ", $0 }' <<<"$out")
    [[ -n $rps && -n $requests && $requests -gt 0 ]] || { echo "$out" >&2; die "no requests completed ($server, $path)"; }
    cpu_us=$(awk -v d=$((after - before)) -v hz="$clk_tck" -v n="$requests" 'BEGIN { printf "%.2f", d / hz * 1e6 / n }')
    printf '| %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %s |\n' \
        "$round" "$server" "$path" "$conns" "$rps" "$(to_us "$p50")" "$(to_us "$p99")" "$transfer" "$cpu_us" "${errors:-none}" \
        | tee -a "$table" >&2
}

# bench NAME CMD...: warm-up, then every connection count on /, then one /big run per size.
bench() {
    local name=$1
    shift
    start "$name" "$@"
    taskset -c 1 wrk -t1 -c50 -d2s "http://$addr/" >/dev/null
    for conns in $CONNS; do
        measure "$name" "$conns" /
    done
    for size in $BIG_SIZES; do
        measure "$name" "$BIG_CONNS" "/big?n=$size"
    done
    stop
}

# Medians (min..max) over the rounds of req/s and server CPU µs/req, per server, path and
# connection count; and each ring-rt server's ratio to tokio's.
summarize() {
    python3 - "$table" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if len(cells) < 9:
        continue
    _, server, path, conns, rps, _, _, _, cpu = cells[:9]
    rows.setdefault((path, int(conns)), {}).setdefault(server, []).append((float(rps), float(cpu)))
print("| path | conns | server | req/s median (min..max) | server CPU µs/req median (min..max) | CPU/req vs tokio |")
print("|---|---:|---|---:|---:|---:|")
for (path, conns), servers in rows.items():
    tokio = servers.get("tokio current_thread")
    tokio_cpu = statistics.median(c for _, c in tokio) if tokio else None
    for server, runs in servers.items():
        rps = [r for r, _ in runs]
        cpu = [c for _, c in runs]
        ratio = f"{statistics.median(cpu) / tokio_cpu:.2f}x" if tokio_cpu else "-"
        print(f"| {path} | {conns} | {server} | {statistics.median(rps):.0f} ({min(rps):.0f}..{max(rps):.0f}) "
              f"| {statistics.median(cpu):.1f} ({min(cpu):.1f}..{max(cpu):.1f}) | {ratio} |")
PY
}

main() {
    need_wrk
    command -v taskset >/dev/null || die "taskset (util-linux) is required"
    build
    mkdir -p "$out_dir"
    table=$log_dir/rows.md
    : >"$table"
    local hyper=$target/release/examples/hyper tokio=$target/release/tokio-hyper
    local servers=(uring epoll)
    [[ -n ${BASELINE_HYPER:-} ]] && servers+=(baseline-uring baseline-epoll)
    servers+=(tokio)
    local n=${#servers[@]}
    for round in $(seq "$ROUNDS"); do
        # Each round starts one server later: the first of a round read up to 20% more
        # CPU per request here (the same code, measured first and later), so no server
        # keeps that place.
        for i in $(seq 0 $((n - 1))); do
            case ${servers[$(((i + round - 1) % n))]} in
                uring) bench "ring-rt uring" "$hyper" --addr "$addr" --threads 1 --backend uring ;;
                epoll) bench "ring-rt epoll" "$hyper" --addr "$addr" --threads 1 --backend epoll ;;
                baseline-uring) bench "baseline uring" "$BASELINE_HYPER" --addr "$addr" --threads 1 --backend uring ;;
                baseline-epoll) bench "baseline epoll" "$BASELINE_HYPER" --addr "$addr" --threads 1 --backend epoll ;;
                tokio) bench "tokio current_thread" "$tokio" --addr "$addr" --flavor current_thread ;;
            esac
        done
    done
    {
        echo "ROUNDS=$ROUNDS${BASELINE_HYPER:+; baseline: $BASELINE_HYPER}; wrk -t1 -c{$CONNS} -d${DURATION}s --latency on /, -c$BIG_CONNS on /big?n={$BIG_SIZES}; server on CPU 0, wrk on CPU 1; $(nproc) CPUs, $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)"
        echo
        summarize
        echo
        echo "Every run:"
        echo
        echo "| round | server | path | conns | req/s | p50 µs | p99 µs | transfer/s | server CPU µs/req | errors |"
        echo "|---:|---|---|---:|---:|---:|---:|---:|---:|---|"
        cat "$table"
    } | tee "$out_dir/wrk.md"
    echo "wrk-hyper: table written to $out_dir/wrk.md" >&2
}

main
