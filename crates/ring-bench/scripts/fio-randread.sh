#!/usr/bin/env bash
# fio-randread.sh: random 4 KiB O_DIRECT reads at queue depth 32 for 10 s, by ring-rt's
# `randread` binary and by fio (io_uring engine) on the same file, printing both IOPS and
# their ratio. Env: FILE (default target/bench-files/randread-256m.bin, created if missing),
# DEPTH (32), SECS (10), BACKENDS ("uring epoll"), SPIN_US ("0": one ring-rt run per value,
# each with Builder::spin_before_park set to it), CARGO_TARGET_DIR (default target).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
file="${FILE:-target/bench-files/randread-256m.bin}"
depth="${DEPTH:-32}"
secs="${SECS:-10}"
backends="${BACKENDS:-uring epoll}"
spins="${SPIN_US:-0}"
target_dir="${CARGO_TARGET_DIR:-target}"

if ! command -v fio >/dev/null; then
    echo "fio-randread: installing fio" >&2
    apt-get install -y fio >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y fio >/dev/null; }
fi

cargo build --release -q -p ring-bench --bin randread
randread="$target_dir/release/randread"

# The first run creates the file (written data, not sparse) when it is missing.
declare -A ring_iops
runs=()
for backend in $backends; do
    for spin in $spins; do
        line="$("$randread" --file "$file" --depth "$depth" --secs "$secs" --backend "$backend" \
            --spin-us "$spin")"
        echo "$line"
        runs+=("$backend spin_us=$spin")
        ring_iops["$backend spin_us=$spin"]="$(sed -n 's/.* iops=\([0-9]*\).*/\1/p' <<<"$line")"
    done
done

# fio's JSON report: read IOPS, and user + system CPU in percent of one core.
report="$(fio --name=randread --ioengine=io_uring --iodepth="$depth" --rw=randread --bs=4k \
    --direct=1 --filename="$file" --runtime="$secs" --time_based --output-format=json)"
read -r fio_iops fio_cpu < <(python3 -c '
import json, sys
job = json.load(sys.stdin)["jobs"][0]
print(round(job["read"]["iops"]), round(job["usr_cpu"] + job["sys_cpu"]))' <<<"$report")
echo "fio ioengine=io_uring direct=1 depth=$depth secs=$secs iops=$fio_iops cpu_pct=$fio_cpu"

for run in "${runs[@]}"; do
    awk -v r="${ring_iops[$run]}" -v f="$fio_iops" -v b="$run" \
        'BEGIN { printf "ring-rt/%s / fio = %.3f (%s vs %s IOPS)\n", b, r / f, r, f }'
done
