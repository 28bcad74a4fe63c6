#!/usr/bin/env bash
# fio-compare.sh: ring-rt's `fileio` binary against fio on the same file, row by row, for
# issue 19's goals 1 (random reads at 0.97x of fio's io_uring IOPS, at no more CPU per read)
# and 3 (writes: depth 1 no slower than fio's sync engine, batched at least fio's io_uring).
#
# Each row is "rw:depth:direct:fsync" (fsync = an fdatasync every that many writes, 0 =
# none); all ops are BS (4096) bytes. The default matrix: randread at depths 1, 8, 32, 128
# with O_DIRECT; randwrite and write at depths 1 and 32, buffered and O_DIRECT, without and
# with an fdatasync after every write. For every row and round the script runs, with
# F = FILE, S = SECS, M = SIZE_MIB:
#
#   target/release/fileio --file F --rw RW --bs 4096 --depth N --direct D --fsync Y \
#       --secs S --backend uring --size-mib M
#   fio --name=fileio --filename=F --size=Mm --rw=RW --bs=4096 --direct=D \
#       --ioengine=io_uring --iodepth=N [--fdatasync=Y when Y > 0] --norandommap \
#       --runtime=S --time_based --output-format=json
#   and for write rows at depth 1 the same fio job with --ioengine=sync --iodepth=1.
#
# ring-rt links each Y-th write to its fdatasync (one IOSQE_IO_LINK chain); fio issues the
# fdatasync as an op of its own after the Y-th write. `--norandommap` makes fio pick
# offsets as fileio does (uniformly, repeats allowed). Before each cell `sync F` writes
# back what the cell before left dirty; each run then drops F's pages from the page cache
# (fio's default invalidate=1, which fileio copies), so no run starts with the cache another
# left, and O_DIRECT writes never meet cached pages (io_uring would hand those to io-wq).
# Rounds interleave the engines: odd rounds run ring-rt first, even rounds fio first. F is
# created (written data, not sparse) by a 1 s warm-up read run of fileio when missing.
#
# The table reports IOPS as median (min..max) over the rounds, the ratio of medians, and CPU
# in µs per op as "thread / process" (medians). thread: the one thread that runs the job, as
# fio reports it (its usr_cpu + sys_cpu come from getrusage(RUSAGE_THREAD)); fileio's is its
# runtime's worker 0. process: everything the process ran, including the io-wq workers to
# which io_uring punts buffered writes (ext4) and fsyncs, which the thread figure leaves
# out; fileio's from getrusage(RUSAGE_SELF) around the run, fio's from RUSAGE_CHILDREN
# around the whole fio command, so it also counts fio's start-up and its parent process
# (about 0.1 s per run). Syncs are not ops on either side. The goal column applies the
# issue's goal to the medians (CPU: the thread figures).
#
# Env: FILE (target/bench-files/fileio-256m.bin), SECS (5), ROUNDS (3), SIZE_MIB (256),
# BS (4096), BACKEND (uring), ROWS (the matrix above), CARGO_TARGET_DIR (target),
# BASELINE_FILEIO (another build's fileio binary, e.g. from a worktree of an older commit:
# run in every round right after this build's, with the same arguments, and reported in
# two more columns, for before/after figures from one interleaved run), FILEIO_ARGS (more
# arguments for this build's fileio only, e.g. "--fixed 1": with BASELINE_FILEIO set to the
# same binary, registered buffers against plain ones in one run), FIO_ARGS (more arguments
# for fio, e.g. "--fixedbufs=1"). Every run's result
# is kept in target/fio-compare/runs.tsv; each run's line goes to stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
size_mib="${SIZE_MIB:-256}"
file="${FILE:-target/bench-files/fileio-${size_mib}m.bin}"
secs="${SECS:-5}"
rounds="${ROUNDS:-3}"
bs="${BS:-4096}"
backend="${BACKEND:-uring}"
target_dir="${CARGO_TARGET_DIR:-target}"
baseline="${BASELINE_FILEIO:-}"
read -r -a fileio_args <<<"${FILEIO_ARGS:-}"
read -r -a fio_args <<<"${FIO_ARGS:-}"
if [[ -n $baseline && ! -x $baseline ]]; then
    echo "fio-compare: BASELINE_FILEIO=$baseline is not an executable" >&2
    exit 2
fi
default_rows="randread:1:1:0 randread:8:1:0 randread:32:1:0 randread:128:1:0"
for rw in randwrite write; do
    for depth in 1 32; do
        for direct in 0 1; do
            for fsync in 0 1; do
                default_rows+=" $rw:$depth:$direct:$fsync"
            done
        done
    done
done
rows="${ROWS:-$default_rows}"

for row in $rows; do
    if ! [[ $row =~ ^(randread|randwrite|read|write):[1-9][0-9]*:[01]:[0-9]+$ ]]; then
        echo "fio-compare: bad row '$row' (want rw:depth:direct:fsync, e.g. write:32:1:1)" >&2
        exit 2
    fi
done

if ! command -v fio >/dev/null; then
    echo "fio-compare: installing fio" >&2
    apt-get install -y fio >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y fio >/dev/null; }
fi

cargo build --release -q -p ring-bench --bin fileio
fileio="$target_dir/release/fileio"
out_dir="target/fio-compare"
mkdir -p "$out_dir"
runs="$out_dir/runs.tsv"
printf 'round\trow\tengine\tiops\tthread_cpu_us\tprocess_cpu_us\n' >"$runs"

if [[ ! -e $file ]]; then
    "$fileio" --file "$file" --rw randread --secs 1 --size-mib "$size_mib" >&2
fi

# Runs fio with the arguments after the first (the rw); prints "iops thread_us process_us":
# fio's IOPS of that direction, its own CPU per op (usr_cpu + sys_cpu over job_runtime), and
# the CPU per op of the fio command with all its processes and threads.
fio_py='
import json, resource, subprocess, sys

def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime

before = children_cpu_s()
out = subprocess.run(["fio", *sys.argv[2:]], check=True, stdout=subprocess.PIPE, text=True).stdout
process_s = children_cpu_s() - before
job = json.loads(out[out.index("{"):])["jobs"][0]
side = job["write" if "write" in sys.argv[1] else "read"]
iops, ios = side["iops"], max(side["total_ios"], 1)
thread_s = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000
print(f"{iops:.0f}\t{thread_s * 1e6 / ios:.2f}\t{process_s * 1e6 / ios:.2f}")'

# One run of row $2 in round $1 by this build's fileio (and then BASELINE_FILEIO's, if set).
run_ring() {
    run_fileio "$fileio" ring-rt "$1" "$2" "${fileio_args[@]}"
    if [[ -n $baseline ]]; then
        run_fileio "$baseline" baseline "$1" "$2"
    fi
}

# One run of row $4 in round $3 by fileio binary $1 (with the arguments after $4 added):
# appends "round row $2 iops thread_us process_us".
run_fileio() {
    local bin=$1 engine=$2 round=$3 row=$4 rw depth direct fsync line
    shift 4
    IFS=: read -r rw depth direct fsync <<<"$row"
    sync "$file"
    line="$("$bin" --file "$file" --rw "$rw" --bs "$bs" --depth "$depth" --direct "$direct" \
        --fsync "$fsync" --secs "$secs" --backend "$backend" --size-mib "$size_mib" "$@")"
    echo "round $round: $engine $line" >&2
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$row" "$engine" \
        "$(sed -n 's/.* iops=\([0-9.]*\).*/\1/p' <<<"$line")" \
        "$(sed -n 's/.* thread_cpu_us_per_op=\([0-9.]*\).*/\1/p' <<<"$line")" \
        "$(sed -n 's/.* cpu_us_per_op=\([0-9.]*\).*/\1/p' <<<"$line")" >>"$runs"
}

# One fio run of row $3 in round $2 on engine $1 (io_uring or sync).
run_fio() {
    local engine=$1 round=$2 row=$3 rw depth direct fsync args result
    IFS=: read -r rw depth direct fsync <<<"$row"
    [[ $engine == sync ]] && depth=1
    args=(--name=fileio --filename="$file" --size="${size_mib}m" --rw="$rw" --bs="$bs"
        --direct="$direct" --ioengine="$engine" --iodepth="$depth" --norandommap
        --runtime="$secs" --time_based --output-format=json "${fio_args[@]}")
    if [[ $fsync != 0 ]]; then
        args+=(--fdatasync="$fsync")
    fi
    sync "$file"
    result="$(python3 -c "$fio_py" "$rw" "${args[@]}")"
    echo "round $round: fio $engine $row iops thread_us process_us: ${result//$'\t'/ }" >&2
    printf '%s\t%s\tfio-%s\t%s\n' "$round" "$row" "$engine" "$result" >>"$runs"
}

# Every engine of row $2 in round $1, ring-rt first in odd rounds and last in even ones.
run_row() {
    local round=$1 row=$2 rw depth engines=(io_uring)
    IFS=: read -r rw depth _ <<<"$row"
    if [[ $rw == *write && $depth == 1 ]]; then
        engines+=(sync)
    fi
    if ((round % 2 == 1)); then
        run_ring "$round" "$row"
    fi
    for engine in "${engines[@]}"; do
        run_fio "$engine" "$round" "$row"
    done
    if ((round % 2 == 0)); then
        run_ring "$round" "$row"
    fi
}

for ((round = 1; round <= rounds; round++)); do
    for row in $rows; do
        run_row "$round" "$row"
    done
done

echo "fileio vs fio: $rounds round(s) of ${secs} s per cell, bs=$bs, ring-rt backend=$backend," \
    "file $file (${size_mib} MiB), $(nproc) CPUs, $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)" \
    "${baseline:+, baseline $baseline}"
echo
python3 - "$runs" "$rows" <<'EOF'
import csv, statistics, sys

runs, rows = sys.argv[1], sys.argv[2].split()
cells = {}
with open(runs) as f:
    for r in csv.DictReader(f, delimiter="\t"):
        cells.setdefault((r["row"], r["engine"]), []).append(
            (float(r["iops"]), float(r["thread_cpu_us"]), float(r["process_cpu_us"])))

def median(row, engine, i):
    runs = cells.get((row, engine))
    return statistics.median(v[i] for v in runs) if runs else None

def iops(row, engine):
    runs = cells.get((row, engine))
    if not runs:
        return "-"
    vals = [v[0] for v in runs]
    return f"{statistics.median(vals):,.0f} ({min(vals):,.0f}..{max(vals):,.0f})"

def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "-"

def cpu(row, engine):
    thread, process = median(row, engine, 1), median(row, engine, 2)
    return "-" if thread is None else f"{thread:.2f} / {process:.2f}"

def name(row):
    rw, depth, direct, fsync = row.split(":")
    mode = "O_DIRECT" if direct == "1" else "buffered"
    sync = f", fdatasync/{fsync}" if fsync != "0" else ""
    return f"{rw} qd{depth} {mode}{sync}"

def goal(row):
    rw, depth = row.split(":")[:2]
    ring, uring, sync = (median(row, e, 0) for e in ("ring-rt", "fio-io_uring", "fio-sync"))
    if None in (ring, uring):
        return "-"
    if rw.endswith("read"):
        cpu_ok = median(row, "ring-rt", 1) <= median(row, "fio-io_uring", 1)
        ok = ring >= 0.97 * uring and cpu_ok
        return f"≥0.97x io_uring, CPU ≤: {'met' if ok else 'not met'}"
    if depth == "1" and sync is not None:
        return f"≥ sync: {'met' if ring >= sync else 'not met'}"
    return f"≥ io_uring: {'met' if ring >= uring else 'not met'}"

has_baseline = any(engine == "baseline" for _, engine in cells)
extra_head = " | baseline IOPS | baseline CPU µs/op" if has_baseline else ""
print("| row | ring-rt IOPS | fio io_uring IOPS | fio sync IOPS | ring-rt / io_uring"
      " | ring-rt / sync | CPU µs/op thread / process: ring-rt | fio io_uring | fio sync"
      f"{extra_head} | goal |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if has_baseline else "")
      + "---|")
for row in rows:
    ring = median(row, "ring-rt", 0)
    extra = f" | {iops(row, 'baseline')} | {cpu(row, 'baseline')}" if has_baseline else ""
    print(f"| {name(row)} | {iops(row, 'ring-rt')} | {iops(row, 'fio-io_uring')}"
          f" | {iops(row, 'fio-sync')} | {ratio(ring, median(row, 'fio-io_uring', 0))}"
          f" | {ratio(ring, median(row, 'fio-sync', 0))} | {cpu(row, 'ring-rt')}"
          f" | {cpu(row, 'fio-io_uring')} | {cpu(row, 'fio-sync')}{extra} | {goal(row)} |")
EOF
