#!/usr/bin/env bash
# Reliability checks beyond the test suites (called from .ci/run; see RELIABILITY.md):
#   1. each cargo-fuzz target for a short run (libFuzzer + AddressSanitizer, nightly);
#   2. the pure model checkers under Miri;
#   3. a short soak of the echo example (1,000 connections, random sizes, flat memory).
# The reliability tests themselves (tests/reliability_*.rs in ring-core and ring-rt) run
# with `cargo test --workspace` and under AddressSanitizer in .ci/run.
# Cost on 2 cores with warm caches: about 2.3 minutes (fuzz build 9 s + 4 x 15 s, Miri 17 s,
# soak 44 s). FUZZ_SECONDS and SOAK_SECONDS lengthen the runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

step() { printf '\n==== %s ====\n' "$*"; }

# Seconds per fuzz target; FUZZ_SECONDS=600 reproduces the documented long runs.
fuzz_seconds=${FUZZ_SECONDS:-15}
soak_seconds=${SOAK_SECONDS:-30}

step "cargo-fuzz"
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal

step "fuzz: replay the kept corpus of each target once, then each for ${fuzz_seconds}s"
(
    cd fuzz
    cargo +nightly fuzz build -O
    for target in op_lifecycle buf_ring buf_group runtime_schedule; do
        # Every input of fuzz/corpus/$target (the minimized corpus of the long runs in
        # RELIABILITY.md, and the inputs of past findings) runs once: -runs=0 fuzzes nothing
        # new, and any crash, panic or leak fails the step. The copy keeps the timed run
        # below from adding to the repository's corpus.
        max_len=1024
        [ "$target" = runtime_schedule ] && max_len=512
        replay=$(mktemp -d)
        cp -r "corpus/$target/." "$replay/"
        echo "-- replay $target: $(ls "$replay" | wc -l) inputs"
        log=$(mktemp)
        rc=0
        cargo +nightly fuzz run -O "$target" "$replay" -- -runs=0 -max_len="$max_len" \
            -timeout=30 >"$log" 2>&1 || rc=$?
        grep -E '^#[0-9]+.*(INITED|DONE)' "$log" | tail -1 || true
        if [ "$rc" -ne 0 ]; then
            tail -60 "$log"
            exit "$rc"
        fi
        rm -rf "$replay" "$log"
    done
    for target in op_lifecycle buf_ring buf_group runtime_schedule; do
        max_len=1024
        [ "$target" = runtime_schedule ] && max_len=512
        echo "-- $target"
        # A crash, a panic (a broken invariant), a leak or a timeout fails the step; the
        # input is saved under fuzz/artifacts/$target/.
        log=$(mktemp)
        rc=0
        scratch=$(mktemp -d)
        cp -r "corpus/$target/." "$scratch/"
        cargo +nightly fuzz run -O "$target" "$scratch" -- \
            -max_total_time="$fuzz_seconds" -max_len="$max_len" -timeout=30 \
            -print_final_stats=1 >"$log" 2>&1 || rc=$?
        rm -rf "$scratch"
        grep -E '^(stat::number_of_executed_units|stat::new_units_added|Done)' "$log" || true
        if [ "$rc" -ne 0 ]; then
            tail -60 "$log"
            exit "$rc"
        fi
        rm -f "$log"
    done
)

step "Miri: model checkers (op lifecycle, buffer ring, buffer groups)"
rustup +nightly component add miri rust-src >/dev/null
MIRIFLAGS="-Zmiri-disable-isolation" cargo +nightly miri test -p ring-core --test reliability_model

step "soak: echo example, 1,000 connections, ${soak_seconds}s"
scripts/soak.sh --duration "$soak_seconds"
