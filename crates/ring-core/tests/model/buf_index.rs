//! Provided-buffer index arithmetic against models: [`BufRing`] push/commit with a simulated
//! kernel consuming from the head, and [`BufGroup`] hand-outs and returns in User and Legacy
//! mode (Ring mode needs a kernel; its ring is the `BufRing` checked here).
//!
//! Invariants: the kernel sees exactly the committed entries, in push order, never a staged
//! one, and no push overwrites an entry it has yet to consume, across u16 index wrap-around;
//! a bid is in one place at a time (never handed out twice, a bogus or double return is
//! refused and counted); every bid's bytes are its own; the tallies match the model; Legacy
//! mode re-provides exactly the returned bids, as maximal contiguous runs.

use std::collections::VecDeque;
use std::io;

use ring_core::buf_pool::{BufGroup, BufLease, BufMode, ProvideRun};
use ring_core::buf_ring::{BufEntry, BufRing};

use super::Bytes;

/// Runs a push/commit/consume schedule on a ring of at most `2^log2_max` entries.
pub fn run_ring(data: &[u8], log2_max: u32) {
    let mut bytes = Bytes::new(data);
    let entries = 1u16 << (u32::from(bytes.u8()) % (log2_max + 1));
    let mut ring = BufRing::new(entries).expect("power-of-two ring");
    let mut model = RingModel::default();
    while !bytes.is_empty() {
        match bytes.u8() % 5 {
            0 | 1 => {
                let n = bytes.below(usize::from(entries) + 1);
                model.push(&mut ring, n, bytes.u8());
            }
            2 => model.commit(&mut ring),
            3 => {
                let n = bytes.below(usize::from(entries) + 1);
                model.consume(&ring, n);
            }
            _ => {
                // A burst moves the indexes by a whole ring, to reach u16 wrap-around.
                model.push(&mut ring, usize::from(entries), bytes.u8());
                model.commit(&mut ring);
                model.consume(&ring, usize::from(entries));
            }
        }
        model.check(&ring);
    }
}

/// The application's and the kernel's view of one ring.
#[derive(Default)]
struct RingModel {
    /// Pushed, not committed.
    staged: VecDeque<BufEntry>,
    /// Committed, not yet consumed by the kernel.
    published: VecDeque<BufEntry>,
    /// The kernel's head (it never tells us; the model keeps it).
    head: u16,
    /// Every entry pushed so far: the next bid and the wrap count.
    pushed: u64,
}

impl RingModel {
    /// Pushes up to `n` entries, as many as the ring has room for.
    fn push(&mut self, ring: &mut BufRing, n: usize, len_seed: u8) {
        let room = usize::from(ring.entries()) - self.staged.len() - self.published.len();
        for _ in 0..n.min(room) {
            let e = BufEntry {
                addr: 0x1000_0000 + self.pushed * 64,
                len: u32::from(len_seed) + 1 + (self.pushed % 7) as u32,
                bid: self.pushed as u16,
            };
            ring.push(e.addr, e.len, e.bid);
            self.staged.push_back(e);
            self.pushed += 1;
        }
    }

    fn commit(&mut self, ring: &mut BufRing) {
        ring.commit();
        self.published.extend(self.staged.drain(..));
    }

    /// The kernel consumes up to `n` entries, reading only up to the published tail.
    fn consume(&mut self, ring: &BufRing, n: usize) {
        for _ in 0..n {
            if self.head == ring.published_tail() {
                assert!(
                    self.published.is_empty(),
                    "kernel sees no entries, model has some"
                );
                return;
            }
            let got = ring.entry(self.head & ring.mask()).expect("masked slot");
            let want = self
                .published
                .pop_front()
                .expect("kernel read past the committed entries");
            assert_eq!(
                got, want,
                "kernel read the wrong entry at head {}",
                self.head
            );
            self.head = self.head.wrapping_add(1);
        }
    }

    fn check(&self, ring: &BufRing) {
        assert_eq!(
            usize::from(ring.staged()),
            self.staged.len(),
            "staged count"
        );
        let tail = self.head.wrapping_add(self.published.len() as u16);
        assert_eq!(ring.published_tail(), tail, "published tail");
        assert_eq!(ring.entry(ring.entries()), None, "slot past the end");
        // Every entry not yet consumed (published or staged) is intact in its slot.
        let pending = self.published.iter().chain(&self.staged);
        for (k, want) in pending.enumerate() {
            let slot = self.head.wrapping_add(k as u16) & ring.mask();
            assert_eq!(
                ring.entry(slot),
                Some(*want),
                "entry {k} past head overwritten"
            );
        }
    }
}

/// Where the model says one bid is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bid {
    /// User: on the free list. Legacy: provided to the kernel, not picked.
    Free,
    /// User: claimed by `take`. Legacy: picked by the kernel for a CQE not yet reaped.
    Out(u8),
    /// A `BufLease` in `leases` owns it.
    Leased,
    /// Legacy: returned, waiting to be provided again.
    Queued,
}

/// Runs a hand-out/return schedule on a User-mode (`legacy == false`) or Legacy-mode group.
pub fn run_group(data: &[u8], legacy: bool) {
    let mut bytes = Bytes::new(data);
    let count = 1 + u16::from(bytes.u8() % 32);
    let buf_len = 1 + u32::from(bytes.u8() % 64);
    let mut m = GroupModel::new(count, buf_len, legacy);
    if legacy {
        m.provide();
    }
    while !bytes.is_empty() {
        m.step += 1;
        match bytes.u8() % 8 {
            0 | 1 => m.pick(bytes.u8()),
            2 => m.lease(bytes.u16(), bytes.u8()),
            3 => m.drop_lease(bytes.u16()),
            4 => m.recycle(bytes.u16()),
            5 => m.bogus(bytes.u16(), bytes.u8()),
            6 => m.provide(),
            _ => m.provide_failed(bytes.u16(), bytes.u8()),
        }
        m.check();
    }
    // Everything comes back: out bids recycled (an orphan's late CQE), leases dropped.
    while m.out_bid(0).is_some() {
        m.recycle(0);
    }
    while !m.leases.is_empty() {
        m.drop_lease(0);
    }
    m.check();
    assert_eq!(m.group.in_use(), 0, "leases dropped, bids still out");
}

struct GroupModel {
    group: BufGroup,
    legacy: bool,
    bids: Vec<Bid>,
    /// User mode's free list, top = next `take` (the warmest buffer goes first).
    free: Vec<u16>,
    leases: Vec<(BufLease, u8)>,
    bad_returns: u64,
    enobufs: u64,
    step: usize,
}

impl GroupModel {
    fn new(count: u16, buf_len: u32, legacy: bool) -> GroupModel {
        let group = if legacy {
            BufGroup::new_legacy(7, count, buf_len)
        } else {
            BufGroup::new_user(7, count, buf_len)
        };
        let group = group.expect("valid sizes");
        assert_eq!(
            group.mode(),
            if legacy {
                BufMode::Legacy
            } else {
                BufMode::User
            }
        );
        let initial = if legacy { Bid::Queued } else { Bid::Free };
        GroupModel {
            group,
            legacy,
            bids: vec![initial; usize::from(count)],
            free: (0..count).rev().collect(),
            leases: Vec::new(),
            bad_returns: 0,
            enobufs: 0,
            step: 0,
        }
    }

    fn where_is(&self, state: impl Fn(Bid) -> bool) -> Vec<u16> {
        (0..self.bids.len() as u16)
            .filter(|&b| state(self.bids[usize::from(b)]))
            .collect()
    }

    /// User: `take`. Legacy: the kernel picks a provided bid (it never says which one until
    /// the CQE). Either way the filler then writes `fill` over the whole buffer.
    fn pick(&mut self, fill: u8) {
        let bid = if self.legacy {
            assert_eq!(self.group.take(), None, "take in Legacy mode");
            let free = self.where_is(|b| b == Bid::Free);
            let Some(&bid) = free.get(usize::from(fill) % free.len().max(1)) else {
                return;
            };
            bid
        } else {
            let got = self.group.take();
            assert_eq!(got, self.free.pop(), "step {}: take", self.step);
            let Some(bid) = got else {
                self.group.record_enobufs();
                self.enobufs += 1;
                return;
            };
            bid
        };
        assert_eq!(
            self.bids[usize::from(bid)],
            Bid::Free,
            "bid {bid} handed out twice"
        );
        let (ptr, len) = self.group.buf_ptr(bid).expect("bid in range");
        assert_eq!(len, self.group.buf_len());
        // SAFETY: `bid` is out (taken, or picked by the simulated kernel), so its `len`
        // bytes belong to this filler alone.
        unsafe { ptr.write_bytes(fill, len) };
        self.bids[usize::from(bid)] = Bid::Out(fill);
    }

    fn out_bid(&self, pick: u16) -> Option<(u16, u8)> {
        let out: Vec<u16> = self.where_is(|b| matches!(b, Bid::Out(_)));
        let bid = *out.get(usize::from(pick) % out.len().max(1))?;
        match self.bids[usize::from(bid)] {
            Bid::Out(fill) => Some((bid, fill)),
            _ => None,
        }
    }

    fn lease(&mut self, pick: u16, len: u8) {
        let Some((bid, fill)) = self.out_bid(pick) else {
            return;
        };
        let len = usize::from(len) % (self.group.buf_len() + 2);
        // SAFETY: the bid is out in the model: taken (User) or picked by the simulated
        // kernel for one CQE (Legacy), and leased once.
        let res = unsafe { self.group.lease(bid, len) };
        if len > self.group.buf_len() {
            let err = res.expect_err("lease longer than the buffer");
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            return;
        }
        let lease = res.expect("lease of an out bid");
        assert_eq!((lease.bid(), lease.len()), (bid, len));
        assert!(
            lease.iter().all(|&b| b == fill),
            "bid {bid}'s bytes changed"
        );
        self.bids[usize::from(bid)] = Bid::Leased;
        self.leases.push((lease, fill));
    }

    fn returned(&mut self, bid: u16) {
        if self.legacy {
            self.bids[usize::from(bid)] = Bid::Queued;
        } else {
            self.bids[usize::from(bid)] = Bid::Free;
            self.free.push(bid);
        }
    }

    fn drop_lease(&mut self, pick: u16) {
        if self.leases.is_empty() {
            return;
        }
        let (lease, _) = self
            .leases
            .swap_remove(usize::from(pick) % self.leases.len());
        let bid = lease.bid();
        drop(lease);
        self.returned(bid);
    }

    fn recycle(&mut self, pick: u16) {
        let Some((bid, _)) = self.out_bid(pick) else {
            return;
        };
        // SAFETY: as in `lease`: an out bid, returned once.
        unsafe { self.group.recycle(bid) };
        self.returned(bid);
    }

    /// Returns and leases of bids that are not out: each must be refused, nothing moved.
    fn bogus(&mut self, bid: u16, how: u8) {
        let bid = bid % (self.bids.len() as u16 + 3);
        let state = self.bids.get(usize::from(bid)).copied();
        // Legacy cannot tell a provided bid from a picked one (both are the kernel's).
        let refusable = match state {
            None | Some(Bid::Leased) | Some(Bid::Queued) => true,
            Some(Bid::Free) => !self.legacy,
            Some(Bid::Out(_)) => false,
        };
        if !refusable {
            return;
        }
        if how % 2 == 0 {
            // SAFETY: in User mode every bid is checked; in Legacy mode only bids the
            // group itself knows are not the kernel's come here (see `refusable`).
            unsafe { self.group.recycle(bid) };
            self.bad_returns += 1;
        } else {
            // SAFETY: as above.
            let err = unsafe { self.group.lease(bid, 1) }.expect_err("lease of a bid not out");
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "step {}", self.step);
        }
    }

    /// Legacy: the returned bids come back as maximal runs and count as provided.
    fn provide(&mut self) {
        let runs = self.group.take_provide_runs();
        if !self.legacy {
            assert!(runs.is_empty(), "User mode provides nothing");
            return;
        }
        let queued = self.where_is(|b| b == Bid::Queued);
        assert_eq!(
            runs,
            maximal_runs(&queued),
            "step {}: provide runs",
            self.step
        );
        for bid in queued {
            self.bids[usize::from(bid)] = Bid::Free;
        }
    }

    /// Legacy: a PROVIDE_BUFFERS for `nbufs` bids from `bid` failed. Provided bids go back to
    /// the queue; any other bid in the range is a bad return.
    fn provide_failed(&mut self, bid: u16, nbufs: u8) {
        let bid = bid % (self.bids.len() as u16 + 2);
        let range = u32::from(bid)..u32::from(bid) + u32::from(nbufs % 8);
        let picked = |b: u32| matches!(self.bids.get(b as usize), Some(Bid::Out(_)));
        if self.legacy && range.clone().any(picked) {
            return; // a picked bid was provided; its PROVIDE cannot have failed
        }
        // SAFETY: the model has no ring (and skipped runs holding a picked bid): the kernel
        // holds no bid of this group.
        unsafe { self.group.provide_failed(bid, u16::from(nbufs % 8)) };
        for b in range {
            match self.bids.get(b as usize) {
                Some(Bid::Free) if self.legacy => self.bids[b as usize] = Bid::Queued,
                _ => self.bad_returns += 1,
            }
        }
    }

    fn check(&self) {
        let step = self.step;
        let count = |f: fn(&Bid) -> bool| self.bids.iter().filter(|b| f(b)).count();
        let out = count(|b| matches!(b, Bid::Out(_)));
        let (free, leased, queued) = (
            count(|b| *b == Bid::Free),
            count(|b| *b == Bid::Leased),
            count(|b| *b == Bid::Queued),
        );
        if self.legacy {
            // Picked bids are still the kernel's to ring-core until their CQE is reaped.
            assert_eq!(self.group.available(), free + out, "step {step}: available");
            assert_eq!(self.group.in_use(), leased, "step {step}: in_use");
        } else {
            assert_eq!(self.group.available(), free, "step {step}: available");
            assert_eq!(self.group.in_use(), out + leased, "step {step}: in_use");
        }
        assert_eq!(self.group.queued(), queued, "step {step}: queued");
        assert_eq!(
            self.group.bad_returns(),
            self.bad_returns,
            "step {step}: bad_returns"
        );
        assert_eq!(self.group.enobufs(), self.enobufs, "step {step}: enobufs");
        for (lease, fill) in &self.leases {
            assert!(
                lease.iter().all(|b| b == fill),
                "step {step}: leased bytes changed"
            );
        }
    }
}

/// Sorted bids as maximal runs of consecutive ids.
fn maximal_runs(bids: &[u16]) -> Vec<ProvideRun> {
    let mut runs: Vec<ProvideRun> = Vec::new();
    for &bid in bids {
        match runs.last_mut() {
            Some(run) if run.bid + run.nbufs == bid => run.nbufs += 1,
            _ => runs.push(ProvideRun { bid, nbufs: 1 }),
        }
    }
    runs
}
