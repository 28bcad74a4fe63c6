#!/usr/bin/env bash
# fio-cpu-split.sh: where the CPU of one file op goes, user space against kernel, for ring-rt's
# `fileio` and fio on the same job (issue 19, goals 1 and 3). CPU time per op moves 10-30%
# with this VM's load from run to run; most of it is the kernel's (the block layer, the
# virtio notify that traps to the host), and it is the same work for every engine. What an
# engine adds is its user-space time and the syscalls it makes, so this splits each run's
# CPU samples into user and kernel per op and per thread.
#
# This machine has no hardware counters, but `perf record -e cpu-clock` (a software timer)
# works; kernel samples need root or `kernel.perf_event_paranoid` at 1 or below. For every
# row and round, with F = FILE, S = SECS, M = SIZE_MIB, H = HZ:
#
#   perf record -e cpu-clock -F H -o DATA target/release/fileio --file F --rw RW --bs 4096 \
#       --depth N --direct D --secs S --backend uring --size-mib M
#   perf record -e cpu-clock -F H -o DATA fio --name=split --filename=F --size=Mm --rw=RW \
#       --bs=4096 --direct=D --ioengine=E --iodepth=N --norandommap --runtime=S \
#       --time_based --output-format=json
#
# with E = io_uring, and also E = sync for depth-1 rows when SYNC=1 (the default). Rounds
# alternate which engine runs first. Each run's samples are summed per thread from
# `perf report --sort pid,sym`: a symbol marked `[.]` is user space, `[k]` kernel. The job
# thread is the thread with the most samples (fileio's worker, fio's job process); "all"
# adds every thread of the process (fio's parent, which mostly reads the clock for its status
# output, and fileio's idle helpers). µs per op = samples / H / ops * 1e6. perf's own
# sampling adds a little to every figure alike; the IOPS under perf are lower than without.
#
# Samples taken on the instruction after a syscall (the glibc `syscall` stub, io-uring's
# `io_uring_enter`) land in user space though the time was the kernel's exit path; fio
# enters through its own stub, so part of fileio's user figure is that, as the per-symbol
# list (TOP) shows.
#
# Env: ROWS ("randread:1:1 randread:8:1 randwrite:1:1 write:1:1": rw:depth:direct), SECS (4),
# ROUNDS (3), HZ (10000), SIZE_MIB (256), FILE (target/bench-files/fileio-256m.bin, made
# by a 1 s fileio run when missing), SYNC (1), TOP (0: how many user-space symbols of the
# job thread to list per engine, summed over rounds), CARGO_TARGET_DIR (target), FILEIO
# (target/release/fileio: another build's binary to split instead), BASELINE_FILEIO
# (another build's fileio, e.g. from a worktree of an older commit: run in every round
# beside this one, reported as "baseline", for before/after figures from one run).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
rows="${ROWS:-randread:1:1 randread:8:1 randwrite:1:1 write:1:1}"
secs="${SECS:-4}"
rounds="${ROUNDS:-3}"
hz="${HZ:-10000}"
size_mib="${SIZE_MIB:-256}"
file="${FILE:-target/bench-files/fileio-${size_mib}m.bin}"
with_sync="${SYNC:-1}"
top="${TOP:-0}"
fileio="${FILEIO:-${CARGO_TARGET_DIR:-target}/release/fileio}"
baseline="${BASELINE_FILEIO:-}"
if [[ -n $baseline && ! -x $baseline ]]; then
    echo "fio-cpu-split: BASELINE_FILEIO=$baseline is not an executable" >&2
    exit 2
fi

for pair in perf:linux-perf fio:fio; do
    tool="${pair%%:*}" package="${pair#*:}"
    if ! command -v "$tool" >/dev/null; then
        echo "fio-cpu-split: installing $package" >&2
        apt-get install -y "$package" >/dev/null 2>&1 ||
            { apt-get update >/dev/null && apt-get install -y "$package" >/dev/null; }
    fi
done
command -v python3 >/dev/null || { echo "fio-cpu-split: python3 not found" >&2; exit 2; }
for row in $rows; do
    [[ $row =~ ^(randread|randwrite|read|write):[1-9][0-9]*:[01]$ ]] ||
        { echo "fio-cpu-split: bad row '$row' (want rw:depth:direct)" >&2; exit 2; }
done
if [[ -z ${FILEIO:-} ]]; then
    cargo build --release -q -p ring-bench --bin fileio
fi
mkdir -p "$(dirname "$file")"
if [[ ! -s $file ]]; then
    "$fileio" --file "$file" --rw read --secs 1 --size-mib "$size_mib" >/dev/null
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
results="$work/results.tsv"
: >"$results"

# Sums one perf.data's samples per thread, user and kernel; prints
# "job_user job_kernel all_user all_kernel" in samples, and keeps the job thread's
# user-space symbols in $work/syms-<engine>.tsv.
split() {
    local data=$1 engine=$2
    perf report -i "$data" --no-children --sort pid,sym --stdio -F sample,pid,sym 2>/dev/null |
        awk -v syms="$work/syms-$engine.tsv" '
        /^#/ || NF < 3 { next }
        {
            n = $1; tid = $2; user = ($0 ~ /\[\.\]/)
            if (user) { u[tid] += n; U += n } else { k[tid] += n; K += n }
            t[tid] += n
            if (user) { sym = $0; sub(/.*\[\.\] /, "", sym); s[tid, sym] += n }
        }
        END {
            for (x in t) if (best == "" || t[x] > t[best]) best = x
            for (key in s) { split(key, parts, SUBSEP); if (parts[1] == best) printf "%s\t%d\n", parts[2], s[key] >> syms }
            printf "%d %d %d %d\n", u[best], k[best], U, K
        }'
}

run_fileio() {
    local bin=$1 label=$2 rw=$3 depth=$4 direct=$5 data="$work/fileio.data" out
    out="$(perf record -q -e cpu-clock -F "$hz" -o "$data" "$bin" --file "$file" --rw "$rw" \
        --bs 4096 --depth "$depth" --direct "$direct" --secs "$secs" --backend uring \
        --size-mib "$size_mib" 2>/dev/null)"
    local ops
    ops="$(grep -o ' ops=[0-9]*' <<<"$out" | head -1 | cut -d= -f2)"
    echo "$ops $(split "$data" "$label")"
}

run_fio() {
    local engine=$1 rw=$2 depth=$3 direct=$4 data="$work/fio.data" json="$work/fio.json"
    perf record -q -e cpu-clock -F "$hz" -o "$data" fio --name=split --filename="$file" \
        --size="${size_mib}m" --rw="$rw" --bs=4096 --direct="$direct" --ioengine="$engine" \
        --iodepth="$depth" --norandommap --runtime="$secs" --time_based \
        --output-format=json >"$json" 2>/dev/null
    local ops
    ops="$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; print(j["read"]["total_ios"]+j["write"]["total_ios"])' "$json")"
    echo "$ops $(split "$data" "fio-$engine")"
}

for row in $rows; do
    IFS=: read -r rw depth direct <<<"$row"
    engines=(io_uring)
    if [[ $with_sync == 1 && $depth == 1 ]]; then
        engines+=(sync)
    fi
    for ((round = 1; round <= rounds; round++)); do
        ours=(ring-rt)
        if [[ -n $baseline ]]; then
            ours+=(baseline)
        fi
        order=("${ours[@]}" "${engines[@]}")
        if ((round % 2 == 0)); then
            order=("${engines[@]}" "${ours[@]}")
        fi
        for who in "${order[@]}"; do
            sync "$file"
            if [[ $who == ring-rt ]]; then
                line="$(run_fileio "$fileio" fileio "$rw" "$depth" "$direct")"
            elif [[ $who == baseline ]]; then
                line="$(run_fileio "$baseline" baseline "$rw" "$depth" "$direct")"
            else
                line="$(run_fio "$who" "$rw" "$depth" "$direct")"
            fi
            echo "round $round $row $who: ops user kernel (job) user kernel (all) = $line" >&2
            printf '%s\t%s\t%s\n' "$row" "$who" "$line" >>"$results"
        done
    done
done

python3 - "$results" "$hz" "$secs" "$rounds" <<'EOF'
import statistics, sys
path, hz, secs, rounds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
cells = {}
order = []
for line in open(path):
    row, who, rest = line.rstrip("\n").split("\t")
    ops, ju, jk, au, ak = (float(x) for x in rest.split())
    if (row, who) not in cells:
        cells[(row, who)] = []
        order.append((row, who))
    us = 1e6 / hz / ops
    cells[(row, who)].append((ops / secs, ju * us, jk * us, au * us, ak * us))

def med(values):
    return statistics.median(values)

def fmt(values, digits):
    return f"{med(values):,.{digits}f} ({min(values):,.{digits}f}..{max(values):,.{digits}f})"

print(f"CPU per op under `perf record -e cpu-clock -F {int(hz)}`, {rounds} round(s) of {secs:g} s, "
      "medians (min..max); job = the busiest thread, all = every thread of the process\n")
print("| row | engine | IOPS under perf | job user µs/op | job kernel µs/op | job total | all user | all kernel |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for row, who in order:
    runs = cells[(row, who)]
    rw, depth, direct = row.split(":")
    label = f"{rw} qd{depth}{' O_DIRECT' if direct == '1' else ''}"
    name = who if who in ("ring-rt", "baseline") else f"fio {who}"
    col = lambda i: [r[i] for r in runs]
    total = [r[1] + r[2] for r in runs]
    print(f"| {label} | {name} | {fmt(col(0), 0)} | {fmt(col(1), 2)} | {fmt(col(2), 2)} | "
          f"{fmt(total, 2)} | {med(col(3)):.2f} | {med(col(4)):.2f} |")
EOF

if ((top > 0)); then
    for syms in "$work"/syms-*.tsv; do
        engine="$(basename "$syms" .tsv)"
        engine="${engine#syms-}"
        echo
        echo "Top $top user-space symbols of the job thread, $engine (samples, all rows and rounds):"
        awk -F'\t' '{ s[$1] += $2 } END { for (k in s) printf "%8d  %s\n", s[k], k }' "$syms" |
            sort -rn | head -"$top"
    done
fi
