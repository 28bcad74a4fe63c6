#!/usr/bin/env bash
# The echo example on both backends: 1, 50, 500 and 5,000 closed-loop clients with every byte
# verified, 64 B .. 256 KiB messages, clients that reset or half-close, clean SIGTERM exit.
# A third run takes connections as direct descriptors on two io_uring workers balanced by
# load, so those moved to worker 1 go by IORING_MSG_SEND_FD (fds on kernels before 6.8).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --example echo -p ring-rt
cargo build --release -p ring-bench --bin echo-load
port=7392
for config in "--backend uring" "--backend epoll" "--backend uring --threads 2 --balance load --direct 8192"; do
    log=$(mktemp)
    # shellcheck disable=SC2086 # the config is several flags
    ./target/release/examples/echo --addr "127.0.0.1:$port" $config >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 50); do grep -q listening "$log" && break; sleep 0.1; done
    head -1 "$log"
    for conns in 1 50 500 5000; do
        ./target/release/echo-load --addr "127.0.0.1:$port" --conns "$conns" --len 64 --len-max 4096 --duration 2
    done
    ./target/release/echo-load --addr "127.0.0.1:$port" --conns 20 --len 65536 --len-max 262144 --duration 2
    python3 .ci/lib/reset_clients.py "$port"
    kill -TERM "$pid"
    wait "$pid"   # non-zero exit here fails the script: shutdown must be clean
    tail -2 "$log"
    rm -f "$log"
done
