//! Direct descriptors against the live kernel: accepted into a sparse table with
//! kernel-allocated slots (5.19+), given an fd by `FIXED_FD_INSTALL` (6.8+), sent to another
//! ring by `MSG_RING`'s `SEND_FD` (6.0+), and closed in order behind the ops queued for them.

#[macro_use]
mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::task::{Poll, Waker};
use std::time::Duration;

use io_uring::{opcode, types};
use libtest_mimic::{Arguments, Completion};
use ring_core::direct::OwnedSlot;
use ring_core::driver::Driver;
use ring_core::probe::{Feature, Features};
use ring_core::user_data;
use support::{driver_with, features, lacks, lacks_opcode, trial, turn_until, wait_op, Outcome};

fn main() {
    let args = Arguments::from_args();
    let tests = vec![
        trial(
            "an_accepted_direct_descriptor_gets_an_fd_to_its_own_socket",
            an_accepted_direct_descriptor_gets_an_fd_to_its_own_socket,
        ),
        trial(
            "a_send_queued_before_a_close_reaches_the_old_socket_not_the_slots_next",
            a_send_queued_before_a_close_reaches_the_old_socket_not_the_slots_next,
        ),
        trial(
            "a_dropped_owned_slot_closes_its_connection",
            a_dropped_owned_slot_closes_its_connection,
        ),
        trial(
            "a_full_table_refuses_an_accept_with_enfile",
            a_full_table_refuses_an_accept_with_enfile,
        ),
        trial(
            "a_direct_descriptor_sent_to_another_ring_arrives_there",
            a_direct_descriptor_sent_to_another_ring_arrives_there,
        ),
        trial(
            "an_arrival_given_up_before_it_came_is_closed",
            an_arrival_given_up_before_it_came_is_closed,
        ),
        trial(
            "sending_to_a_ring_without_a_table_fails_and_keeps_the_slot",
            sending_to_a_ring_without_a_table_fails_and_keeps_the_slot,
        ),
        trial(
            "a_table_of_zero_or_too_many_slots_is_refused",
            a_table_of_zero_or_too_many_slots_is_refused,
        ),
    ];
    libtest_mimic::run(&args, tests).exit();
}

/// Features with multishot accept into a sparse table and `FIXED_FD_INSTALL`, or why not.
fn direct_features() -> Result<Features, Completion> {
    let features = features()?;
    if let Some(skip) = lacks(&features, Feature::MultishotAccept) {
        return Err(skip);
    }
    if let Some(skip) = lacks_opcode(&features, opcode::FixedFdInstall::CODE) {
        return Err(skip);
    }
    Ok(features)
}

/// A driver with a direct table of `slots`.
fn direct_driver(features: &Features, slots: u32) -> Result<Driver, String> {
    let mut driver = driver_with(features.clone(), 16, 0);
    driver
        .register_direct(slots)
        .map_err(|e| format!("register_direct: {e}"))?;
    Ok(driver)
}

fn listener() -> std::io::Result<(TcpListener, std::net::SocketAddr)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    Ok((l, addr))
}

/// Accepts one connection on `l` into a slot the kernel allocates; the slot, owned.
fn accept_direct(driver: &mut Driver, l: &TcpListener) -> Result<OwnedSlot, String> {
    let sqe = opcode::Accept::new(
        types::Fd(l.as_raw_fd()),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    )
    .file_index(Some(types::DestinationSlot::auto_target()))
    .build();
    // SAFETY: no address buffers; `l` outlives the op, which completes before we return.
    let id = unsafe { driver.submit_op(sqe) }.map_err(|e| e.to_string())?;
    let cqe = wait_op(driver, id).map_err(|e| format!("{e:?}"))?;
    if cqe.res < 0 {
        return Err(format!(
            "accept: {}",
            std::io::Error::from_raw_os_error(-cqe.res)
        ));
    }
    let closer = driver.direct_closer().ok_or("no table")?;
    // SAFETY: the accept just put its connection in this slot; nobody else has it.
    Ok(unsafe { closer.adopt(cqe.res as u32) })
}

/// Installs an fd for `slot` on `driver`, checks it is `client`'s peer, and sends `msg`
/// through it to `client`.
fn talk_through_an_installed_fd(
    driver: &mut Driver,
    slot: &OwnedSlot,
    client: &mut TcpStream,
    msg: &[u8],
) -> Result<(), libtest_mimic::Failed> {
    // SAFETY: the slot is the test's own.
    let fd = unsafe { driver.install_direct(slot.slot()) }?;
    let server = TcpStream::from(fd);
    check!(
        server.peer_addr()? == client.local_addr()?,
        "the installed fd is another socket"
    );
    (&server).write_all(msg)?;
    let mut got = vec![0u8; msg.len()];
    client.set_read_timeout(Some(Duration::from_secs(5)))?;
    client.read_exact(&mut got)?;
    check!(got == msg, "read {got:?}");
    Ok(())
}

fn an_accepted_direct_descriptor_gets_an_fd_to_its_own_socket() -> Outcome {
    let features = or_skip!(direct_features());
    let mut driver = direct_driver(&features, 4)?;
    let (l, addr) = listener()?;
    let mut client = TcpStream::connect(addr)?;
    let slot = accept_direct(&mut driver, &l)?;
    talk_through_an_installed_fd(&mut driver, &slot, &mut client, b"hi")?;
    let snapshot = driver.metrics().snapshot();
    check!(
        snapshot.direct_installs == 1 && snapshot.direct_opened == 1,
        "metrics: {snapshot}"
    );
    drop(slot);
    turn_until(&mut driver, Duration::from_secs(5), |d| {
        d.metrics().snapshot().direct_closed == 1
    })?;
    Ok(Completion::Completed)
}

fn a_send_queued_before_a_close_reaches_the_old_socket_not_the_slots_next() -> Outcome {
    let features = or_skip!(direct_features());
    // One slot: the next accept can only take the one just closed.
    let mut driver = direct_driver(&features, 1)?;
    let (l, addr) = listener()?;
    let mut first = TcpStream::connect(addr)?;
    let slot = accept_direct(&mut driver, &l)?;
    let mut second = TcpStream::connect(addr)?;
    let msg: &'static [u8] = b"old";
    let send = opcode::Send::new(types::Fixed(slot.slot()), msg.as_ptr(), msg.len() as u32);
    // SAFETY: `msg` is static; the slot is ours until the close pushed below.
    let sent = unsafe { driver.submit_op(send.build()) }?;
    // Pushed behind the send, before the enter that submits both.
    drop(slot);
    driver.submit()?;
    let accepted = accept_direct(&mut driver, &l)?;
    check!(accepted.slot() == 0, "the only slot is {}", accepted.slot());
    let cqe = wait_op(&mut driver, sent)?;
    check!(cqe.res == 3, "send result {}", cqe.res);
    let mut got = [0u8; 3];
    first.set_read_timeout(Some(Duration::from_secs(5)))?;
    first.read_exact(&mut got)?;
    check!(&got == b"old", "the old socket read {got:?}");
    second.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut byte = [0u8; 1];
    let leaked = second.read(&mut byte);
    check!(
        leaked.is_err(),
        "the slot's next socket got bytes meant for the old one: {leaked:?}"
    );
    Ok(Completion::Completed)
}

fn a_dropped_owned_slot_closes_its_connection() -> Outcome {
    let features = or_skip!(direct_features());
    let mut driver = direct_driver(&features, 4)?;
    let (l, addr) = listener()?;
    let mut client = TcpStream::connect(addr)?;
    let slot = accept_direct(&mut driver, &l)?;
    drop(slot);
    // The close waits for the next turn or submit.
    driver.submit()?;
    client.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut byte = [0u8; 1];
    let n = client.read(&mut byte)?;
    check!(n == 0, "the server side stayed open (read {n})");
    Ok(Completion::Completed)
}

fn a_full_table_refuses_an_accept_with_enfile() -> Outcome {
    let features = or_skip!(direct_features());
    let mut driver = direct_driver(&features, 1)?;
    let (l, addr) = listener()?;
    let _a = TcpStream::connect(addr)?;
    let _b = TcpStream::connect(addr)?;
    let kept = accept_direct(&mut driver, &l)?;
    let refused = accept_direct(&mut driver, &l);
    check!(
        refused.as_ref().is_err_and(|e| e.contains("os error 23")),
        "second accept into a full table: {refused:?}"
    );
    drop(kept);
    Ok(Completion::Completed)
}

/// Sends `slot` from `from` to `to` under `seq` (`MSG_RING`'s `SEND_FD` into a slot `to`'s
/// kernel allocates) and waits for the sender's result.
fn send(from: &mut Driver, to: &Driver, slot: &OwnedSlot, seq: u32) -> Result<i32, String> {
    let target = to.msg_ring_target().map_err(|e| e.to_string())?;
    let sqe = opcode::MsgRingSendFd::new(
        types::Fd(target.as_raw_fd()),
        types::Fixed(slot.slot()),
        types::DestinationSlot::auto_target(),
        user_data::arrival_user_data(seq),
    )
    .build();
    // SAFETY: no pointers; `target` and the slot stay open until the op's CQE, awaited here.
    let id = unsafe { from.submit_op(sqe) }.map_err(|e| e.to_string())?;
    let cqe = wait_op(from, id).map_err(|e| format!("{e:?}"))?;
    Ok(cqe.res)
}

fn a_direct_descriptor_sent_to_another_ring_arrives_there() -> Outcome {
    let features = or_skip!(direct_features());
    let mut a = direct_driver(&features, 4)?;
    let mut b = direct_driver(&features, 4)?;
    let (l, addr) = listener()?;
    let mut client = TcpStream::connect(addr)?;
    let slot = accept_direct(&mut a, &l)?;
    let res = send(&mut a, &b, &slot, 7)?;
    check!(res == 0, "send_direct result {res}");
    drop(slot);
    let mut arrived = None;
    turn_until(&mut b, Duration::from_secs(5), |d| {
        if let Poll::Ready(r) = d.poll_arrival(7, Waker::noop()) {
            arrived = Some(r);
        }
        arrived.is_some()
    })?;
    let slot = arrived.expect("set above")?;
    // Counted once, when its CQE came (an arrival nobody claims shows as held).
    let opened = b.metrics().snapshot().direct_opened;
    check!(opened == 1, "the arrival counted {opened} times");
    talk_through_an_installed_fd(&mut b, &slot, &mut client, b"moved")?;
    // Claimed once: the same number again waits for another arrival.
    check!(
        b.poll_arrival(7, Waker::noop()).is_pending(),
        "an arrival was handed out twice"
    );
    b.forget_arrival(7);
    Ok(Completion::Completed)
}

fn an_arrival_given_up_before_it_came_is_closed() -> Outcome {
    let features = or_skip!(direct_features());
    let mut a = direct_driver(&features, 4)?;
    let mut b = direct_driver(&features, 4)?;
    let (l, addr) = listener()?;
    let mut client = TcpStream::connect(addr)?;
    let slot = accept_direct(&mut a, &l)?;
    // The receiver waits, then gives up before the sender sends.
    check!(
        b.poll_arrival(9, Waker::noop()).is_pending(),
        "arrived before it was sent"
    );
    b.forget_arrival(9);
    let res = send(&mut a, &b, &slot, 9)?;
    check!(res == 0, "send_direct result {res}");
    drop(slot);
    a.submit()?;
    turn_until(&mut b, Duration::from_secs(5), |d| {
        let s = d.metrics().snapshot();
        s.direct_opened == 1 && s.direct_closed == 1
    })?;
    b.submit()?;
    client.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut byte = [0u8; 1];
    let n = client.read(&mut byte)?;
    check!(
        n == 0,
        "the abandoned arrival kept the socket open (read {n})"
    );
    Ok(Completion::Completed)
}

fn sending_to_a_ring_without_a_table_fails_and_keeps_the_slot() -> Outcome {
    let features = or_skip!(direct_features());
    let mut a = direct_driver(&features, 4)?;
    let b = driver_with(features.clone(), 16, 0);
    let (l, addr) = listener()?;
    let mut client = TcpStream::connect(addr)?;
    let slot = accept_direct(&mut a, &l)?;
    let res = send(&mut a, &b, &slot, 1)?;
    check!(res < 0, "sent into a ring with no table: {res}");
    // The sender still has its descriptor.
    talk_through_an_installed_fd(&mut a, &slot, &mut client, b"k")?;
    Ok(Completion::Completed)
}

fn a_table_of_zero_or_too_many_slots_is_refused() -> Outcome {
    let features = or_skip!(direct_features());
    let mut driver = driver_with(features, 16, 0);
    for slots in [0, u32::MAX] {
        let err = driver.register_direct(slots).err();
        check!(
            err.as_ref()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::InvalidInput),
            "{slots} slots: {err:?}"
        );
    }
    check!(
        driver.direct_closer().is_none(),
        "a refused table registered"
    );
    Ok(Completion::Completed)
}
