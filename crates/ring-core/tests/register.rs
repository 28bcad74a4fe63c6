//! Registered files and buffers against the live kernel, driven through the raw `io-uring`
//! crate (fixed files 5.1, sparse tables 5.19, direct accept 5.15, fixed buffers 5.1).
//! Run with `RING_FEATURES=5.1` (etc.) to see which tests an older kernel would skip.

#[macro_use]
mod support;

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt as _;
use std::ptr;
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring};
use libtest_mimic::{Arguments, Completion};
use ring_core::register::FixedFiles;
use ring_core::register_buf::RegisteredBufs;
use support::{child_command, child_outcome, features, lacks_kernel, lacks_opcode, trial, Outcome};

fn main() {
    let args = Arguments::from_args();
    let tests = vec![
        trial(
            "fixed_file_reads_after_original_fd_is_closed",
            fixed_file_reads_after_original_fd_is_closed,
        ),
        trial(
            "insert_of_a_path_only_fd_is_ebadf",
            insert_of_a_path_only_fd_is_ebadf,
        ),
        trial(
            "remove_of_slot_not_in_use_is_invalid_input",
            remove_of_slot_not_in_use_is_invalid_input,
        ),
        trial(
            "full_table_insert_errors_until_a_slot_is_removed",
            full_table_insert_errors_until_a_slot_is_removed,
        ),
        trial(
            "second_file_table_is_ebusy_and_zero_capacity_is_invalid",
            second_file_table_is_ebusy_and_zero_capacity_is_invalid,
        ),
        trial(
            "accept_direct_into_alloced_slot_then_send_and_recv",
            accept_direct_into_alloced_slot_then_send_and_recv,
        ),
        trial(
            "write_fixed_then_read_fixed_round_trips",
            write_fixed_then_read_fixed_round_trips,
        ),
        trial(
            "registered_alloc_until_none_and_drop_returns_chunk",
            registered_alloc_until_none_and_drop_returns_chunk,
        ),
        trial(
            "unregistered_buffers_fail_fixed_ops_and_allow_a_new_table",
            unregistered_buffers_fail_fixed_ops_and_allow_a_new_table,
        ),
        trial(
            "memlock_limit_gives_clear_error",
            memlock_limit_gives_clear_error,
        ),
        trial(MEMLOCK_CHILD_TEST, child_memlock).with_ignored_flag(true),
    ];
    libtest_mimic::run(&args, tests).exit();
}

/// A small ring for a test that needs registered buffers (5.1), or why not.
fn ring() -> Result<IoUring, Completion> {
    features()?;
    Ok(IoUring::new(8).expect("io_uring_setup on a kernel whose probe succeeded"))
}

/// A small ring for a test of [`FixedFiles`], whose empty slots (-1 entries) and
/// `IORING_REGISTER_FILES_UPDATE` need 5.5, or why not.
fn ring_for_files() -> Result<IoUring, Completion> {
    let features = features()?;
    if let Some(skip) = lacks_kernel(&features, "5.5", "sparse registered files") {
        return Err(skip);
    }
    ring()
}

/// Pushes one SQE, waits for its CQE and returns its `res`.
///
/// # Safety
///
/// Every buffer and fd the SQE names must stay valid until this returns.
unsafe fn run(ring: &mut IoUring, sqe: squeue::Entry) -> i32 {
    // SAFETY: the caller keeps the SQE's buffers alive until its CQE, which we wait for.
    unsafe { ring.submission().push(&sqe.user_data(7)) }.expect("SQ has room");
    ring.submit_and_wait(1).expect("io_uring_enter");
    let cqe = ring.completion().next().expect("one CQE");
    assert_eq!(cqe.user_data(), 7);
    cqe.result()
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two fds into the 2-element array.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", io::Error::last_os_error());
    // SAFETY: both fds were just created and are owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// An `O_PATH` fd: open, but no file the kernel will register (its fget refuses it).
fn path_only_fd() -> OwnedFd {
    // SAFETY: a NUL-terminated path; the result is checked and owned below.
    let fd = unsafe { libc::open(c"/".as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    assert!(fd >= 0, "open O_PATH: {}", io::Error::last_os_error());
    // SAFETY: `fd` was just opened and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn fixed_file_reads_after_original_fd_is_closed() -> Outcome {
    let features = or_skip!(features());
    skip_if!(lacks_opcode(&features, opcode::Read::CODE));
    let mut ring = or_skip!(ring_for_files());
    let mut files = FixedFiles::register(&ring.submitter(), 64).unwrap();
    assert_eq!((files.capacity(), files.in_use()), (64, 0));
    let (rd, wr) = pipe();
    File::from(wr).write_all(b"hello fixed").unwrap();
    let slot = files.insert(&ring.submitter(), rd.as_fd()).unwrap();
    drop(rd);

    let mut buf = [0u8; 32];
    let read = opcode::Read::new(slot, buf.as_mut_ptr(), buf.len() as u32).build();
    // SAFETY: `buf` outlives the call.
    assert_eq!(unsafe { run(&mut ring, read) }, 11);
    assert_eq!(&buf[..11], b"hello fixed");

    // SAFETY: the slot holds this test's own pipe end, used by nobody else.
    unsafe { files.remove(&ring.submitter(), slot) }.unwrap();
    assert_eq!(files.in_use(), 0);
    let read = opcode::Read::new(slot, buf.as_mut_ptr(), buf.len() as u32).build();
    // SAFETY: as above.
    let res = unsafe { run(&mut ring, read) };
    assert_eq!(res, -libc::EBADF, "a removed slot holds no file");
    Ok(Completion::Completed)
}

fn insert_of_a_path_only_fd_is_ebadf() -> Outcome {
    let ring = or_skip!(ring_for_files());
    let mut files = FixedFiles::register(&ring.submitter(), 4).unwrap();
    let fd = path_only_fd();
    let err = files.insert(&ring.submitter(), fd.as_fd()).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EBADF), "{err}");
    assert_eq!(files.in_use(), 0, "a failed insert gives its slot back");
    Ok(Completion::Completed)
}

fn remove_of_slot_not_in_use_is_invalid_input() -> Outcome {
    let ring = or_skip!(ring_for_files());
    let mut files = FixedFiles::register(&ring.submitter(), 4).unwrap();
    for slot in [0, 3, 4, u32::MAX] {
        // SAFETY: no slot is in use: nothing can be closed.
        let err = unsafe { files.remove(&ring.submitter(), types::Fixed(slot)) }.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "slot {slot}");
    }
    Ok(Completion::Completed)
}

fn full_table_insert_errors_until_a_slot_is_removed() -> Outcome {
    let ring = or_skip!(ring_for_files());
    let mut files = FixedFiles::register(&ring.submitter(), 2).unwrap();
    let (rd, _wr) = pipe();
    let a = files.insert(&ring.submitter(), rd.as_fd()).unwrap();
    let b = files.insert(&ring.submitter(), rd.as_fd()).unwrap();
    assert_ne!(a.0, b.0);
    let err = files.insert(&ring.submitter(), rd.as_fd()).unwrap_err();
    assert!(err.to_string().contains("table full"), "{err}");
    // SAFETY: the slot holds this test's own pipe end.
    unsafe { files.remove(&ring.submitter(), a) }.unwrap();
    assert_eq!(files.insert(&ring.submitter(), rd.as_fd()).unwrap().0, a.0);
    Ok(Completion::Completed)
}

fn second_file_table_is_ebusy_and_zero_capacity_is_invalid() -> Outcome {
    let ring = or_skip!(ring_for_files());
    let err = FixedFiles::register(&ring.submitter(), 0).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    let _files = FixedFiles::register(&ring.submitter(), 8).unwrap();
    let err = FixedFiles::register(&ring.submitter(), 8).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EBUSY), "{err}");
    Ok(Completion::Completed)
}

fn accept_direct_into_alloced_slot_then_send_and_recv() -> Outcome {
    let features = or_skip!(features());
    skip_if!(lacks_kernel(&features, "5.15", "direct accept"));
    skip_if!(lacks_opcode(&features, opcode::Send::CODE));
    let mut ring = or_skip!(ring_for_files());
    let mut files = FixedFiles::register(&ring.submitter(), 64).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();

    let slot = files.alloc_slot().unwrap();
    let dest = types::DestinationSlot::try_from_slot_target(slot).unwrap();
    let accept = opcode::Accept::new(
        types::Fd(listener.as_raw_fd()),
        ptr::null_mut(),
        ptr::null_mut(),
    )
    .file_index(Some(dest))
    .build();
    // SAFETY: no buffers; the listener outlives the call.
    let res = unsafe { run(&mut ring, accept) };
    if res == -libc::EINVAL {
        // SAFETY: the direct accept failed: the kernel's slot stayed empty.
        assert!(unsafe { files.release_slot(slot) });
        return Ok(Completion::ignored_with(
            "needs direct accept (Linux 5.15+): ACCEPT with file_index gave EINVAL",
        ));
    }
    assert_eq!(res, 0, "direct accept into a chosen slot returns 0");
    let conn = types::Fixed(slot);

    let send = opcode::Send::new(conn, b"ping".as_ptr(), 4).build();
    // SAFETY: the static message outlives the call.
    assert_eq!(unsafe { run(&mut ring, send) }, 4);
    let mut got = [0u8; 4];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ping");

    client.write_all(b"pong").unwrap();
    let mut buf = [0u8; 16];
    let recv = opcode::Recv::new(conn, buf.as_mut_ptr(), buf.len() as u32).build();
    // SAFETY: `buf` outlives the call.
    assert_eq!(unsafe { run(&mut ring, recv) }, 4);
    assert_eq!(&buf[..4], b"pong");

    // SAFETY: the slot holds the connection this test accepted, used by nobody else.
    unsafe { files.remove(&ring.submitter(), conn) }.unwrap();
    // A slow (emulated) machine can interrupt the blocking read: retry on EINTR.
    let n = loop {
        match client.read(&mut got) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => break other.unwrap(),
        }
    };
    assert_eq!(n, 0, "removing the slot closed the socket");
    Ok(Completion::Completed)
}

/// An anonymous temp file (created, then unlinked while open).
fn temp_file() -> File {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let path = std::env::temp_dir().join(format!("ring-core-reg-{}-{nanos}", std::process::id()));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    file
}

fn write_fixed_then_read_fixed_round_trips() -> Outcome {
    let mut ring = or_skip!(ring());
    // SAFETY: `bufs` (and every FixedBuf) outlives `ring`: the ring is dropped at the end.
    let bufs = unsafe { RegisteredBufs::register(&ring.submitter(), 4, 5000) }.unwrap();
    assert!(bufs.chunk_len() >= 5000);
    let file = temp_file();
    let fd = types::Fd(file.as_raw_fd());
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();

    let _first = bufs.alloc().unwrap();
    let mut out = bufs.alloc().unwrap();
    assert_eq!(out.copy_from(&data), 5000);
    let write =
        opcode::WriteFixed::new(fd, out.as_ptr(), out.len() as u32, out.buf_index()).build();
    // SAFETY: `out` and `file` outlive the call.
    assert_eq!(unsafe { run(&mut ring, write) }, 5000);
    let mut on_disk = vec![0u8; 5000];
    file.read_exact_at(&mut on_disk, 0).unwrap();
    assert_eq!(on_disk, data);

    let mut back = bufs.alloc().unwrap();
    let cap = back.capacity() as u32;
    let read = opcode::ReadFixed::new(fd, back.as_mut_ptr(), cap, back.buf_index()).build();
    // SAFETY: `back` and `file` outlive the call.
    let res = unsafe { run(&mut ring, read) };
    assert_eq!(res, 5000);
    // SAFETY: the completed READ_FIXED initialised `res` bytes.
    unsafe { back.set_len(res as usize) };
    assert_eq!(back.as_slice(), &data[..]);
    drop(ring);
    Ok(Completion::Completed)
}

fn registered_alloc_until_none_and_drop_returns_chunk() -> Outcome {
    let ring = or_skip!(ring());
    // SAFETY: no fixed op is ever submitted, and `ring` is dropped before `bufs` at the end.
    let bufs = unsafe { RegisteredBufs::register(&ring.submitter(), 3, 4096) }.unwrap();
    let mut held: Vec<_> = (0..3).map(|_| bufs.alloc().unwrap()).collect();
    assert!(bufs.alloc().is_none());
    let returned = held.pop().unwrap().buf_index();
    assert_eq!(bufs.available(), 1);
    assert_eq!(bufs.alloc().unwrap().buf_index(), returned);
    drop(ring);
    Ok(Completion::Completed)
}

fn unregistered_buffers_fail_fixed_ops_and_allow_a_new_table() -> Outcome {
    let mut ring = or_skip!(ring());
    // SAFETY: `bufs` and `buf` outlive their registration, which `unregister` ends below.
    let bufs = unsafe { RegisteredBufs::register(&ring.submitter(), 2, 4096) }.unwrap();
    // SAFETY: this one fails (EBUSY), so nothing is registered.
    let err = unsafe { RegisteredBufs::register(&ring.submitter(), 2, 4096) }.unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EBUSY), "{err}");
    let mut buf = bufs.alloc().unwrap();
    bufs.unregister(&ring.submitter()).unwrap();

    let file = temp_file();
    let read = opcode::ReadFixed::new(
        types::Fd(file.as_raw_fd()),
        buf.as_mut_ptr(),
        16,
        buf.buf_index(),
    )
    .build();
    // SAFETY: `buf` (whose memory the pool keeps) and `file` outlive the call.
    let res = unsafe { run(&mut ring, read) };
    assert!(res < 0, "READ_FIXED after unregister gave {res}");
    // SAFETY: `again` outlives the ring, dropped first at the end.
    let again = unsafe { RegisteredBufs::register(&ring.submitter(), 2, 4096) }.unwrap();
    assert_eq!(again.available(), 2);
    drop(ring);
    Ok(Completion::Completed)
}

/// Set only in the child process `memlock_limit_gives_clear_error` starts.
const MEMLOCK_CHILD: &str = "RING_CORE_MEMLOCK_CHILD";
/// The child-only trial that lowers RLIMIT_MEMLOCK and drops root in its own process.
const MEMLOCK_CHILD_TEST: &str = "child_memlock";

/// Runs [`child_memlock`] in a child process that lowers RLIMIT_MEMLOCK (and, as root, drops
/// to `nobody` so CAP_IPC_LOCK no longer bypasses it), where registering 1 MiB must fail
/// clearly. The child's checks decide this test's outcome.
fn memlock_limit_gives_clear_error() -> Outcome {
    or_skip!(features());
    let mut command = child_command(MEMLOCK_CHILD_TEST);
    command.env(MEMLOCK_CHILD, "1");
    child_outcome(MEMLOCK_CHILD_TEST, command)
}

/// The child of [`memlock_limit_gives_clear_error`]; it changes process-wide limits and
/// credentials, so it refuses to run anywhere else.
fn child_memlock() -> Outcome {
    if std::env::var_os(MEMLOCK_CHILD).is_none() {
        return Ok(Completion::ignored_with(
            "runs only as a child of memlock_limit_gives_clear_error",
        ));
    }
    let lim = libc::rlimit {
        rlim_cur: 64 * 1024,
        rlim_max: 64 * 1024,
    };
    // SAFETY: setrlimit reads one valid rlimit; lowering a limit needs no privilege.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) }, 0);
    if !drop_root_to_nobody() {
        return Ok(Completion::ignored_with(
            "cannot drop root to test RLIMIT_MEMLOCK",
        ));
    }
    let ring = IoUring::new(8)?;
    // SAFETY: the registration is expected to fail; if it succeeds the pool is kept until
    // the process (this child) exits.
    match unsafe { RegisteredBufs::register(&ring.submitter(), 16, 64 * 1024) }
        .map(std::mem::forget)
    {
        Ok(_) => Ok(Completion::ignored_with(
            "memlock not enforced (CAP_IPC_LOCK held?)",
        )),
        Err(e) => {
            assert_eq!(e.kind(), io::ErrorKind::OutOfMemory, "{e}");
            assert!(e.to_string().contains("RLIMIT_MEMLOCK"), "{e}");
            Ok(Completion::Completed)
        }
    }
}

/// As root, becomes `nobody` (losing CAP_IPC_LOCK); returns false if that failed.
fn drop_root_to_nobody() -> bool {
    // SAFETY: plain id syscalls, run only in the child process made for this check.
    unsafe { libc::geteuid() != 0 || (libc::setgid(65534) == 0 && libc::setuid(65534) == 0) }
}
