#!/usr/bin/env bash
# Every test binary of ring-core and ring-rt (unit tests too) run under random pauses: the
# whole process is stopped (SIGSTOP) for 20-300 ms every 0-50 ms and continued (SIGCONT),
# as a VM's paused vCPU, Ctrl-Z and `fg`, `docker pause` or a debugger would. A test that
# assumes a short sleep is still pending, or that another thread got somewhere within a few
# ms, fails here; so does an op whose kernel worker the stop interrupts (an open came back
# "os error 512").
# Not part of .ci/run (the pauses are random); run it after touching timing-sensitive tests:
#
#     ROUNDS=2 .ci/pause-chaos.sh
#
# Skipped: ring-core's driver::batched_wait_gathers_then_gives_up counts the enters of one
# batched wait, and a signal ends a wait (EINTR, by design: the loop comes round again).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-1}
out=${CARGO_TARGET_DIR:-target}/pause-chaos
mkdir -p "$out"
bins=$(cargo test -p ring-core -p ring-rt --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    # Integration tests, and the unit tests of each crate (its lib built as a test).
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["profile"]["test"] and "bench" not in m["target"]["kind"]:
        print(m["target"]["name"], m["executable"])
')
failed=0
while read -r name exe; do
    skip=()
    [[ $name == driver ]] && skip=(--skip batched_wait_gathers_then_gives_up)
    for round in $(seq "$ROUNDS"); do
        log=$out/$name-$round.log
        "$exe" "${skip[@]}" >"$log" 2>&1 &
        pid=$!
        while kill -0 "$pid" 2>/dev/null; do
            sleep "0.0$((RANDOM % 5))"
            kill -STOP "$pid" 2>/dev/null || true
            sleep "$(printf '0.%03d' $((20 + RANDOM % 280)))"
            kill -CONT "$pid" 2>/dev/null || true
        done
        status=0
        wait "$pid" || status=$?
        summary=$(grep -E '^test result' "$log" | head -1 | cut -c1-60)
        if [[ $status -ne 0 ]]; then
            failed=1
            echo "FAILED $name round $round: $summary ($log)"
            grep -E '^    [A-Za-z0-9_:]+$' "$log" | sed 's/^/    /' || true
        else
            echo "ok     $name round $round: $summary"
        fi
    done
done <<<"$bins"
exit $failed
