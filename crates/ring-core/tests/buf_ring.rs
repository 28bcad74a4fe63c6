//! Provided buffers against the live kernel, driven through the raw `io-uring` crate: buffer
//! rings (Linux 5.19+) and legacy `PROVIDE_BUFFERS` (5.7+) feeding buffer-select recvs.
//! Run with `RING_FEATURES=5.11` (etc.) to see which tests an older kernel would skip.

#[macro_use]
mod support;

use std::collections::HashSet;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use libtest_mimic::{Arguments, Completion};
use ring_core::buf_pool::{BufGroup, BufLease, BufMode};
use ring_core::probe::Feature;
use support::{features, lacks, lacks_opcode, trial, Outcome};

const BUF_LEN: u32 = 64;
const PROVIDE_TAG: u64 = 0xb0f;

fn main() {
    let args = Arguments::from_args();
    let tests = vec![
        trial(
            "ring_group_hands_out_distinct_bids_then_enobufs_then_the_returned_bid",
            ring_group_hands_out_distinct_bids_then_enobufs_then_the_returned_bid,
        ),
        trial(
            "ring_group_never_duplicates_bids_across_1000_recvs",
            ring_group_never_duplicates_bids_across_1000_recvs,
        ),
        trial(
            "ring_group_unregister_leaves_recvs_without_buffers",
            ring_group_unregister_leaves_recvs_without_buffers,
        ),
        trial(
            "legacy_group_provides_recvs_and_reprovides_after_lease_drop",
            legacy_group_provides_recvs_and_reprovides_after_lease_drop,
        ),
    ];
    libtest_mimic::run(&args, tests).exit();
}

/// A ring for a test whose (masked) features have buffer rings and RECV, or why not.
fn ring_for_buf_ring() -> Result<IoUring, Completion> {
    let features = features()?;
    if let Some(skip) = lacks(&features, Feature::PbufRing) {
        return Err(skip);
    }
    if let Some(skip) = lacks_opcode(&features, opcode::Recv::CODE) {
        return Err(skip);
    }
    Ok(IoUring::new(16).expect("io_uring_setup on a kernel whose probe succeeded"))
}

/// A Ring-mode group on `ring`; the probe said buffer rings exist, so any error fails.
fn ring_group(ring: &IoUring, bgid: u16, count: u16) -> io::Result<BufGroup> {
    // SAFETY: every test drops `ring` (after reaping all its ops) before the group.
    unsafe { BufGroup::new_ring(&ring.submitter(), bgid, count, BUF_LEN) }
}

/// Submits one buffer-select recv on `fd` from group `bgid` and waits for its CQE.
fn recv_select(ring: &mut IoUring, fd: i32, bgid: u16) -> cqueue::Entry {
    let sqe = opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), BUF_LEN)
        .buf_group(bgid)
        .build()
        .flags(squeue::Flags::BUFFER_SELECT)
        .user_data(1);
    submit_one(ring, sqe)
}

fn submit_one(ring: &mut IoUring, sqe: squeue::Entry) -> cqueue::Entry {
    // SAFETY: a recv with buffer select names no memory of its own; the buffers belong to a
    // group that outlives the ring. Other SQEs here are PROVIDE_BUFFERS, likewise.
    unsafe { ring.submission().push(&sqe) }.expect("submission queue has room");
    ring.submit_and_wait(1).expect("io_uring_enter");
    ring.completion()
        .next()
        .expect("a CQE after waiting for one")
}

/// Writes `msg`, recvs it through the group and leases the buffer it landed in.
fn send_and_lease(
    ring: &mut IoUring,
    pair: &mut (UnixStream, UnixStream),
    group: &BufGroup,
    msg: &[u8],
) -> BufLease {
    pair.0.write_all(msg).unwrap();
    let cqe = recv_select(ring, pair.1.as_raw_fd(), group.bgid());
    assert!(
        cqe.result() >= 0,
        "recv failed: {}",
        io::Error::from_raw_os_error(-cqe.result())
    );
    let bid = cqueue::buffer_select(cqe.flags()).expect("CQE carries IORING_CQE_F_BUFFER");
    // SAFETY: `bid` is this CQE's, leased once.
    let lease = unsafe { group.lease(bid, cqe.result() as usize) }.unwrap();
    assert_eq!(&*lease, msg, "bytes in bid {bid}");
    lease
}

/// With every buffer out, a recv whose data is waiting fails with ENOBUFS and picks nothing.
fn expect_enobufs(
    ring: &mut IoUring,
    pair: &mut (UnixStream, UnixStream),
    group: &BufGroup,
    msg: &[u8],
) {
    pair.0.write_all(msg).unwrap();
    let cqe = recv_select(ring, pair.1.as_raw_fd(), group.bgid());
    assert_eq!(cqe.result(), -libc::ENOBUFS);
    assert_eq!(cqueue::buffer_select(cqe.flags()), None);
    group.record_enobufs();
}

fn pair() -> (UnixStream, UnixStream) {
    UnixStream::pair().unwrap()
}

fn ring_group_hands_out_distinct_bids_then_enobufs_then_the_returned_bid() -> Outcome {
    let mut ring = or_skip!(ring_for_buf_ring());
    let group = ring_group(&ring, 7, 4)?;
    assert_eq!(group.mode(), BufMode::Ring);
    let mut pair = pair();
    let mut leases: Vec<BufLease> = (0..4)
        .map(|i| send_and_lease(&mut ring, &mut pair, &group, format!("msg-{i}").as_bytes()))
        .collect();
    let bids: HashSet<u16> = leases.iter().map(BufLease::bid).collect();
    assert_eq!(bids.len(), 4, "distinct bids: {leases:?}");
    assert_eq!(group.in_use(), 4);

    // The data stays in the socket, so the next recv after a return reads it.
    expect_enobufs(&mut ring, &mut pair, &group, b"late");
    assert_eq!(group.enobufs(), 1);
    let returned = leases.remove(2);
    let returned_bid = returned.bid();
    drop(returned);
    let cqe = recv_select(&mut ring, pair.1.as_raw_fd(), group.bgid());
    assert_eq!(cqe.result(), 4);
    assert_eq!(cqueue::buffer_select(cqe.flags()), Some(returned_bid));
    // SAFETY: this CQE's bid, leased once.
    let lease = unsafe { group.lease(returned_bid, 4) }.unwrap();
    assert_eq!(&*lease, b"late");
    assert_eq!(group.bad_returns(), 0);
    drop(ring);
    Ok(Completion::Completed)
}

/// A small xorshift, so the return order is random but reproducible without a crate.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn ring_group_never_duplicates_bids_across_1000_recvs() -> Outcome {
    let mut ring = or_skip!(ring_for_buf_ring());
    let group = ring_group(&ring, 8, 8)?;
    let mut pair = pair();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut held: Vec<BufLease> = Vec::new();
    let mut recvs = 0;
    while recvs < 1000 {
        // Return one lease in a random position about a third of the time, and always when full.
        if held.len() == 8 || (!held.is_empty() && rng.next() % 3 == 0) {
            let i = (rng.next() % held.len() as u64) as usize;
            drop(held.swap_remove(i));
            continue;
        }
        let lease = send_and_lease(
            &mut ring,
            &mut pair,
            &group,
            format!("recv {recvs:04}").as_bytes(),
        );
        assert!(
            held.iter().all(|l| l.bid() != lease.bid()),
            "bid {} handed out twice",
            lease.bid()
        );
        held.push(lease);
        recvs += 1;
        assert_eq!(group.in_use(), held.len());
    }
    assert_eq!((group.enobufs(), group.bad_returns()), (0, 0));
    drop(ring);
    Ok(Completion::Completed)
}

fn ring_group_unregister_leaves_recvs_without_buffers() -> Outcome {
    let mut ring = or_skip!(ring_for_buf_ring());
    let group = ring_group(&ring, 9, 2)?;
    let mut pair = pair();
    drop(send_and_lease(&mut ring, &mut pair, &group, b"before"));
    group.unregister(&ring.submitter()).unwrap();
    expect_enobufs(&mut ring, &mut pair, &group, b"after");
    assert!(
        group.unregister(&ring.submitter()).is_err(),
        "bgid 9 is gone"
    );
    Ok(Completion::Completed)
}

/// Submits the group's pending PROVIDE_BUFFERS SQEs and checks each succeeded.
fn provide(ring: &mut IoUring, group: &BufGroup) -> usize {
    let sqes = group.take_provide_sqes();
    for (sqe, _run) in &sqes {
        let cqe = submit_one(ring, sqe.clone().user_data(PROVIDE_TAG));
        assert_eq!(cqe.user_data(), PROVIDE_TAG);
        assert!(
            cqe.result() >= 0,
            "PROVIDE_BUFFERS: {}",
            io::Error::from_raw_os_error(-cqe.result())
        );
    }
    sqes.len()
}

fn legacy_group_provides_recvs_and_reprovides_after_lease_drop() -> Outcome {
    let features = or_skip!(features());
    skip_if!(lacks_opcode(&features, opcode::ProvideBuffers::CODE));
    skip_if!(lacks_opcode(&features, opcode::Recv::CODE));
    let mut ring = IoUring::new(16)?;
    let group = BufGroup::new_legacy(11, 4, BUF_LEN)?;
    assert_eq!(provide(&mut ring, &group), 1, "four fresh bids are one run");
    let mut pair = pair();
    let mut leases: Vec<BufLease> = (0..4)
        .map(|i| send_and_lease(&mut ring, &mut pair, &group, format!("old-{i}").as_bytes()))
        .collect();
    let bids: HashSet<u16> = leases.iter().map(BufLease::bid).collect();
    assert_eq!(bids.len(), 4, "distinct bids: {leases:?}");
    expect_enobufs(&mut ring, &mut pair, &group, b"waiting");

    // Return bids 0 and 2 (not contiguous: two SQEs); the kernel has none until re-provided.
    leases.retain(|l| l.bid() % 2 == 1);
    assert_eq!(group.queued(), 2);
    expect_enobufs(&mut ring, &mut pair, &group, b"");
    assert_eq!(provide(&mut ring, &group), 2);
    let first = recv_select(&mut ring, pair.1.as_raw_fd(), group.bgid());
    let bid = cqueue::buffer_select(first.flags()).expect("a provided buffer");
    assert!(bid % 2 == 0, "got bid {bid}, which was never returned");
    // SAFETY: this CQE's bid, leased once.
    let lease = unsafe { group.lease(bid, first.result() as usize) }.unwrap();
    assert_eq!(&*lease, b"waiting");
    assert_eq!((group.enobufs(), group.bad_returns()), (2, 0));
    drop(ring);
    Ok(Completion::Completed)
}
