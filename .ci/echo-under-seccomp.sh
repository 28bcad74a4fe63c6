#!/usr/bin/env bash
# The echo example with io_uring blocked by seccomp (EPERM as Docker, ENOSYS as Podman):
# it must pick epoll, say why, and echo every byte for 1, 50 and 500 concurrent clients.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --example echo -p ring-rt
cargo build --release -p ring-testkit -p ring-bench
port=7391
for errno in EPERM ENOSYS; do
    log=$(mktemp)
    ./target/release/deny-io-uring "$errno" -- ./target/release/examples/echo --addr "127.0.0.1:$port" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 50); do grep -q listening "$log" && break; sleep 0.1; done
    head -1 "$log"
    grep -q "backend=epoll" "$log" || { echo "echo did not fall back to epoll under $errno"; kill "$pid"; exit 1; }
    grep -q "$errno" "$log" || { echo "echo did not report $errno"; kill "$pid"; exit 1; }
    for conns in 1 50 500; do
        ./target/release/echo-load --addr "127.0.0.1:$port" --conns "$conns" --len 64 --len-max 4096 --duration 2
    done
    kill -TERM "$pid"
    wait "$pid"
    tail -1 "$log"
    rm -f "$log"
done
