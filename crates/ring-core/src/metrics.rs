//! Counters: cheap to bump on the hot path (one relaxed add), readable from any thread.
//!
//! One [`Metrics`] per ring, shared by `Arc` so a bench or a metrics endpoint can read a
//! [`Snapshot`] while the ring's thread keeps running.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Live counters of one ring (or one epoll backend).
        #[derive(Debug, Default)]
        pub struct Metrics {
            $($(#[$doc])* pub $name: AtomicU64,)*
        }

        /// A point-in-time copy of [`Metrics`].
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Snapshot {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl Metrics {
            /// Reads every counter (each individually atomic; the set is not a transaction).
            pub fn snapshot(&self) -> Snapshot {
                Snapshot { $($name: self.$name.load(Relaxed),)* }
            }
        }

        impl Snapshot {
            /// Counter-wise sum, for totals over several rings.
            pub fn plus(&self, other: &Snapshot) -> Snapshot {
                Snapshot { $($name: self.$name.wrapping_add(other.$name),)* }
            }

            /// Counter-wise difference, for measuring one stretch of work.
            pub fn since(&self, earlier: &Snapshot) -> Snapshot {
                Snapshot { $($name: self.$name.wrapping_sub(earlier.$name),)* }
            }

            /// (name, value) pairs in declaration order, for tables and JSON.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters! {
    /// `io_uring_enter` calls (or `epoll_wait` calls on the epoll backend).
    enters,
    /// SQEs handed to the kernel.
    sqes_submitted,
    /// `MSG_RING` wake-ups sent to another ring (instead of an eventfd write).
    msg_rings_sent,
    /// CQEs consumed.
    cqes_reaped,
    /// Times the kernel flagged `IORING_SQ_CQ_OVERFLOW` (completions parked in the kernel).
    cq_overflows,
    /// Completions the kernel reported lost (`EBADR`): should stay zero.
    cqes_lost,
    /// Times a push found the SQ full and had to submit first.
    sq_full,
    /// Recvs that found their provided-buffer group empty.
    enobufs,
    /// `ASYNC_CANCEL` SQEs pushed.
    cancels_sent,
    /// Late CQEs released by orphans.
    orphans_reaped,
    /// CQEs whose `user_data` matched no live op.
    stale_cqes,
    /// Ops between submission and their final CQE (a gauge, not a counter).
    ops_in_flight,
    /// Direct descriptors this ring took: sockets accepted into its file table and ones
    /// other rings sent it (see `ring_core::direct`).
    direct_opened,
    /// Direct descriptors this ring closed (their `CLOSE` pushed): with `direct_opened`,
    /// how many it holds.
    direct_closed,
    /// Regular fds installed for direct descriptors (`FIXED_FD_INSTALL`).
    direct_installs,
}

impl Metrics {
    /// Adds one to a counter.
    #[inline]
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// Adds `n` to a counter.
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// Sets a gauge.
    #[inline]
    pub fn set(gauge: &AtomicU64, value: u64) {
        gauge.store(value, Relaxed);
    }
}

impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, value)) in self.fields().into_iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{name}={value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_difference() {
        let m = Metrics::default();
        Metrics::bump(&m.enters);
        let before = m.snapshot();
        Metrics::add(&m.enters, 3);
        Metrics::bump(&m.sqes_submitted);
        let delta = m.snapshot().since(&before);
        assert_eq!(delta.enters, 3);
        assert_eq!(delta.sqes_submitted, 1);
        assert!(m.snapshot().to_string().contains("enters=4"));
    }
}
