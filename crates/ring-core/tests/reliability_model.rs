//! The pure model checkers of `tests/model/` (op lifecycle, buffer-ring index arithmetic,
//! buffer groups) over random schedules. Pure: no kernel, so this whole file also runs under
//! Miri (`cargo +nightly miri test -p ring-core --test reliability_model`). The fuzz targets
//! in `fuzz/` run the same checkers under libFuzzer.

mod model;

use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 6 } else { 512 },
        // No regression files: Miri's isolation forbids the filesystem.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Longest schedule: under Miri every step is interpreted, so keep them short there.
const LEN_MAX: usize = if cfg!(miri) { 96 } else { 1024 };

proptest! {
    #![proptest_config(config())]

    #[test]
    fn op_table_matches_lifecycle_model(data in prop::collection::vec(any::<u8>(), 0..LEN_MAX)) {
        model::op_lifecycle::run(&data);
    }

    #[test]
    fn buf_ring_matches_kernel_consumer_model(data in prop::collection::vec(any::<u8>(), 0..LEN_MAX)) {
        model::buf_index::run_ring(&data, if cfg!(miri) { 3 } else { 8 });
    }

    #[test]
    fn user_group_matches_bid_model(data in prop::collection::vec(any::<u8>(), 0..LEN_MAX)) {
        model::buf_index::run_group(&data, false);
    }

    #[test]
    fn legacy_group_matches_bid_model(data in prop::collection::vec(any::<u8>(), 0..LEN_MAX)) {
        model::buf_index::run_group(&data, true);
    }
}

/// A schedule of whole-ring bursts on the largest ring: the u16 head and tail wrap twice.
#[test]
#[cfg_attr(miri, ignore = "32768-entry bursts are too slow to interpret")]
fn buf_ring_indexes_survive_u16_wrap() {
    // Byte 0 picks 2^15 entries (15 % 16); each `4` is a push-commit-consume burst.
    let mut data = vec![15u8];
    data.extend(std::iter::repeat_n([4u8, 9], 5).flatten());
    model::buf_index::run_ring(&data, 15);
}

/// Hand-picked schedules: a multishot op dropped with CQEs queued, then late CQEs; an op
/// re-polled with another waker; a poll after the final CQE; stale and reserved CQEs.
#[test]
fn op_table_fixed_schedules() {
    use model::op_lifecycle::{encode, run, Step::*};
    let more = |op| Cqe {
        op,
        more: true,
        res_code: 64,
    };
    let last = |op| Cqe {
        op,
        more: false,
        res_code: 1,
    };
    let schedules = [
        vec![
            Insert { multishot: true },
            more(0),
            more(0),
            Drop { op: 0 },
            more(0),
            last(0),
            Stale { op: 0 },
        ],
        vec![
            Insert { multishot: false },
            Poll { op: 0, waker: 1 },
            Poll { op: 0, waker: 2 },
            last(0),
            Poll { op: 0, waker: 0 },
            Poll { op: 0, waker: 0 },
            Reserved { pick: 1 },
            Reserved { pick: 4 },
        ],
        vec![
            Insert { multishot: false },
            Insert { multishot: true },
            Insert { multishot: false },
            Drop { op: 0 },
            Drop { op: 1 },
            Drop { op: 2 },
            last(2),
            last(0),
            more(1),
            Insert { multishot: false },
            Stale { op: 2 },
            last(1),
        ],
    ];
    for steps in schedules {
        run(&encode(&steps));
    }
}
