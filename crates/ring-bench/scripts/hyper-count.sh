#!/usr/bin/env bash
# Counts what noise cannot move for the hyper example (examples/hyper.rs) and tokio's
# (src/bin/tokio-hyper.rs) under wrk on `/` (or URL_PATH): user-space instructions per request
# (cachegrind, Ir only) and, with SPAWNS=1, tasks spawned per request (a uprobe on every
# monomorphized `ring_rt::executor::Executor::spawn`; needs perf and root). Each server runs
# one thread on CPU 0, `wrk -t1` on CPU 1. Instructions per request are (Ir of a run under
# wrk) minus (Ir of the same server started and stopped with no request), over wrk's request
# count.
#
# ROUNDS=2 SECS=10 CONNS="50 200" SPAWNS=1 crates/ring-bench/scripts/hyper-count.sh
# URL_PATH='/big?n=16777216' CONNS=50 crates/ring-bench/scripts/hyper-count.sh
#
# BASELINE_HYPER=path/to/another/build/examples/hyper adds that build's uring and epoll
# servers beside this one's, as in wrk-hyper.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"

ROUNDS=${ROUNDS:-2}
SECS=${SECS:-10}
CONNS=${CONNS:-"50 200"}
SPAWNS=${SPAWNS:-0}
URL_PATH=${URL_PATH:-/}
PORT=${PORT:-18600}
target=${CARGO_TARGET_DIR:-$root/target}
hyper=$target/release/examples/hyper
tokio=$target/release/tokio-hyper
work=$(mktemp -d)
server_pid=""

die() {
    echo "hyper-count: $*" >&2
    exit 1
}

cleanup() {
    if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill -KILL "$server_pid" 2>/dev/null || true
    fi
    [[ $SPAWNS == 1 ]] && perf probe -q -d 'probe_hyper:*' >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for tool in wrk valgrind taskset; do
    command -v $tool >/dev/null || apt-get install -y -q $tool >/dev/null 2>&1 ||
        die "$tool is not installed and apt-get could not install it"
done
[[ $SPAWNS == 1 ]] && { command -v perf >/dev/null || die "SPAWNS=1 needs perf"; }

echo "hyper-count: building both servers (release)" >&2
cargo build --release -q -p ring-rt --example hyper --features tokio-io,hyper
cargo build --release -q -p ring-bench --bin tokio-hyper

# wait_listening PORT: until something accepts on 127.0.0.1:PORT (60 s at most).
wait_listening() {
    for _ in $(seq 600); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return
        sleep 0.1
    done
    die "nothing listens on port $1 after 60 s"
}

# load CONNS SECS PORT: wrk's request count (0 when SECS is 0).
load() {
    [[ $2 == 0 ]] && { echo 0; return; }
    taskset -c 1 wrk -t1 -c"$1" -d"$2"s "http://127.0.0.1:$3$URL_PATH" | awk '/requests in/ {print $1}'
}

# instructions CONNS SECS SERVER...: "Ir requests" of one run under cachegrind.
instructions() {
    local conns=$1 secs=$2 port=$PORT out=$work/cg
    shift 2
    PORT=$((PORT + 1))
    taskset -c 0 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$out" \
        "$@" --addr "127.0.0.1:$port" >/dev/null 2>&1 &
    server_pid=$!
    wait_listening "$port"
    local requests
    requests=$(load "$conns" "$secs" "$port")
    kill -TERM "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    echo "$(awk '/^summary:/ {print $2}' "$out") $requests"
    rm -f "$out"
}

# spawns CONNS BINARY ARGS...: "spawns requests" of one run with the uprobes counting.
spawns() {
    local conns=$1 port=$PORT
    shift
    PORT=$((PORT + 1))
    taskset -c 0 "$@" --addr "127.0.0.1:$port" >/dev/null 2>&1 &
    server_pid=$!
    wait_listening "$port"
    perf stat -x, -e 'probe_hyper:*' -p "$server_pid" -o "$work/stat" &
    local stat=$!
    sleep 0.2
    local requests
    requests=$(load "$conns" "$SECS" "$port")
    kill -INT "$stat"
    wait "$stat" 2>/dev/null || true
    kill -TERM "$server_pid"
    wait "$server_pid" 2>/dev/null || true
    echo "$(grep probe_hyper "$work/stat" | cut -d, -f1 | paste -sd+ | bc) $requests"
}

probe() {
    perf probe -q -d 'probe_hyper:*' >/dev/null 2>&1 || true
    local i=0
    for sym in $(nm "$1" | grep -o '_ZN7ring_rt8executor8Executor5spawn17h[0-9a-f]*E' | sort -u); do
        i=$((i + 1))
        perf probe -q -x "$1" --no-demangle -a "sp$i=$sym" >/dev/null
    done
}

servers=("ring-rt uring|$hyper --threads 1 --backend uring" "ring-rt epoll|$hyper --threads 1 --backend epoll")
if [[ -n ${BASELINE_HYPER:-} ]]; then
    servers+=("baseline uring|$BASELINE_HYPER --threads 1 --backend uring")
    servers+=("baseline epoll|$BASELINE_HYPER --threads 1 --backend epoll")
fi
servers+=("tokio current_thread|$tokio --flavor current_thread")

echo "| round | server | conns | requests | Ir per request |"
echo "|---:|---|---:|---:|---:|"
for round in $(seq "$ROUNDS"); do
    for conns in $CONNS; do
        for entry in "${servers[@]}"; do
            name=${entry%%|*}
            read -r -a cmd <<<"${entry#*|}"
            read -r idle _ < <(instructions "$conns" 0 "${cmd[@]}")
            read -r busy requests < <(instructions "$conns" "$SECS" "${cmd[@]}")
            echo "| $round | $name | $conns | $requests | $(((busy - idle) / requests)) |"
        done
    done
done

[[ $SPAWNS == 1 ]] || exit 0
echo
echo "| server | conns | spawns | requests | spawns per request |"
echo "|---|---:|---:|---:|---:|"
for entry in "${servers[@]}"; do
    name=${entry%%|*}
    read -r -a cmd <<<"${entry#*|}"
    [[ $name == tokio* ]] && continue
    probe "${cmd[0]}"
    for conns in $CONNS; do
        read -r count requests < <(spawns "$conns" "${cmd[@]}")
        echo "| $name | $conns | $count | $requests | $(printf %.3f "$(echo "scale=4; $count / $requests" | bc)") |"
    done
done
