//! Asking the running kernel: FEAT bits, `IORING_REGISTER_PROBE`, and one small trial per
//! flag-level feature, each on its own scratch ring so no trial sees another's leftovers.
//!
//! A trial answers `Ok(true)` (present), `Ok(false)` (EINVAL/EOPNOTSUPP, or the kernel ignored
//! the flag), or `Err` (anything else: absent, and the errno is kept for the table). Socket
//! trials wait with a timeout through `IORING_ENTER_EXT_ARG` (5.11, older than every feature
//! they test), so a kernel that never answers costs at most [`WAIT`] per wait.

use std::io::{self, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::ptr;
use std::time::{Duration, Instant, SystemTime};

use io_uring::{opcode, squeue, types, IoUring, Probe};

use super::{opcode_bit, opcode_since, Feature, Features, KernelVersion};
use crate::cqe::Cqe;
use crate::setup::SetupError;

type Builder = io_uring::Builder;
type Trial = fn(&Ctx) -> io::Result<bool>;

/// Scratch rings are tiny: setup cost is what matters, and no trial queues more than two SQEs.
const SCRATCH_ENTRIES: u32 = 4;
/// The longest a trial waits for one completion that should arrive at once.
const WAIT: Duration = Duration::from_millis(50);
const UD_OP: u64 = 1;
const UD_CANCEL: u64 = 2;
const UD_PROVIDE: u64 = 3;
const BGID: u16 = 7;
/// `IOU_PBUF_RING_INC` (6.12): the kernel consumes a ring's buffers incrementally.
const IOU_PBUF_RING_INC: u16 = 2;
const BUF_RING_ENTRIES: u16 = 2;
/// Bytes mapped for a trial buffer ring (two 16-byte entries); mmap rounds up to a page.
const PAGE_LEN: usize = 4096;
const RECV_LEN: usize = 64;
/// Sent by the socket trials; `static`, so a zero-copy send may read it for as long as it likes.
static PAYLOAD: [u8; 8] = *b"ringprob";

/// Each flag-level feature and the trial that detects it.
const TRIALS: &[(Feature, Trial)] = &[
    (Feature::CoopTaskrun, coop_taskrun),
    (Feature::TaskrunFlag, taskrun_flag),
    (Feature::SingleIssuer, single_issuer),
    (Feature::DeferTaskrun, defer_taskrun),
    (Feature::Sqpoll, sqpoll),
    (Feature::SubmitAll, submit_all),
    (Feature::NoSqArray, no_sqarray),
    (Feature::PbufRing, pbuf_ring),
    (Feature::PbufRingInc, pbuf_ring_inc),
    (Feature::MultishotAccept, multishot_accept),
    (Feature::MultishotRecv, multishot_recv),
    (Feature::SendZc, send_zc),
    (Feature::MsgRing, msg_ring),
    (Feature::RegisteredRing, registered_ring),
    (Feature::MultishotPoll, multishot_poll),
];

/// What the trials may rely on: the first ring's answers.
struct Ctx {
    feat_raw: u32,
    opcodes: u128,
}

impl Ctx {
    fn has_opcode(&self, opcode: u8) -> bool {
        self.opcodes & opcode_bit(opcode) != 0
    }

    /// An op can be tried when the kernel has it and waits can time out (EXT_ARG).
    fn can_try_op(&self, opcode: u8) -> bool {
        let ext_arg = Feature::ExtArg.feat_bit().unwrap_or(0);
        self.has_opcode(opcode) && self.feat_raw & ext_arg != 0
    }
}

/// Probes the running kernel; fails only when `io_uring_setup` itself fails.
pub(super) fn probe_kernel() -> Result<Features, SetupError> {
    let ring = IoUring::new(SCRATCH_ENTRIES).map_err(|e| SetupError::from_io(&e))?;
    let feat_raw = feat_bits(ring.params());
    let kernel_release = kernel_release();
    let (opcodes, is_opcodes_inferred) = match probe_opcodes(&ring) {
        Ok(opcodes) => (opcodes, false),
        Err(_) => (infer_opcodes(&kernel_release), true),
    };
    drop(ring);
    let from_feat_bits = Feature::ALL
        .iter()
        .filter(|f| f.feat_bit().is_some_and(|bit| feat_raw & bit != 0));
    let mut present = from_feat_bits.fold(0, |bits, f| bits | f.bit());
    let ctx = Ctx { feat_raw, opcodes };
    let mut trial_errnos = Vec::new();
    for &(feature, trial) in TRIALS {
        match trial(&ctx) {
            Ok(true) => present |= feature.bit(),
            Ok(false) => {}
            Err(e) => trial_errnos.push((feature, e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }
    Ok(Features {
        present,
        opcodes,
        feat_raw,
        kernel_release,
        hidden: 0,
        hidden_opcodes: 0,
        mask_label: None,
        trial_errnos,
        is_opcodes_inferred,
    })
}

/// The leading fields of the kernel's `struct io_uring_params`, up to `features`.
#[repr(C)]
struct ParamsHead {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
}

/// `io_uring_params.features` in full: io-uring has a predicate per bit but hides some bits
/// (REG_REG_RING, RW_ATTR) and any bit newer than itself.
fn feat_bits(params: &io_uring::Parameters) -> u32 {
    const _: () = assert!(size_of::<ParamsHead>() <= size_of::<io_uring::Parameters>());
    let head = ptr::from_ref(params).cast::<ParamsHead>();
    // SAFETY: `Parameters` is `#[repr(transparent)]` over the kernel's `io_uring_params` (io-uring
    // documents this), whose UAPI layout opens with these six `u32`s; it is larger (asserted
    // above) and at least 4-aligned, so this read stays inside `params` and is aligned.
    unsafe { (*head).features }
}

fn kernel_release() -> String {
    // SAFETY: `utsname` is arrays of `c_char`, for which all zeroes is a valid value.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uname` writes only into the struct we pass, which we own.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return String::new();
    }
    let bytes: Vec<u8> = uts
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn probe_opcodes(ring: &IoUring) -> io::Result<u128> {
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    let supported = (0..=127).filter(|&op| probe.is_supported(op));
    Ok(supported.fold(0, |bits, op| bits | opcode_bit(op)))
}

/// Before 5.6 there is no opcode probe: take every opcode the kernel's version should have.
fn infer_opcodes(release: &str) -> u128 {
    let version = KernelVersion::from_release(release).unwrap_or(KernelVersion::new(5, 1));
    let known = (0..=127).filter(|&op| opcode_since(op).is_some_and(|since| since <= version));
    known.fold(0, |bits, op| bits | opcode_bit(op))
}

/// EINVAL and EOPNOTSUPP are the kernel saying "not here"; anything else is a failed trial.
fn is_absent(err: io::Error) -> io::Result<bool> {
    match err.raw_os_error() {
        Some(libc::EINVAL | libc::EOPNOTSUPP) => Ok(false),
        _ => Err(err),
    }
}

fn try_setup(configure: impl FnOnce(&mut Builder)) -> io::Result<bool> {
    let mut builder: Builder = IoUring::builder();
    configure(&mut builder);
    match builder.build(SCRATCH_ENTRIES) {
        Ok(_ring) => Ok(true),
        Err(err) => is_absent(err),
    }
}

fn coop_taskrun(_: &Ctx) -> io::Result<bool> {
    try_setup(|b| {
        b.setup_coop_taskrun();
    })
}

/// TASKRUN_FLAG is only valid with COOP_TASKRUN or DEFER_TASKRUN.
fn taskrun_flag(_: &Ctx) -> io::Result<bool> {
    try_setup(|b| {
        b.setup_coop_taskrun().setup_taskrun_flag();
    })
}

fn single_issuer(_: &Ctx) -> io::Result<bool> {
    try_setup(|b| {
        b.setup_single_issuer();
    })
}

/// DEFER_TASKRUN is only valid with SINGLE_ISSUER.
fn defer_taskrun(_: &Ctx) -> io::Result<bool> {
    try_setup(|b| {
        b.setup_single_issuer().setup_defer_taskrun();
    })
}

/// Before 5.11 an unprivileged SQPOLL ring fails with EPERM: absent, with the errno shown.
fn sqpoll(_: &Ctx) -> io::Result<bool> {
    try_setup(|b| {
        b.setup_sqpoll(1);
    })
}

fn submit_all(_: &Ctx) -> io::Result<bool> {
    try_setup(|b| {
        b.setup_submit_all();
    })
}

/// The opcode is all it takes: a MSG_RING to another ring needs nothing else of the
/// kernel (its CQE on the target and the sender's own are plain CQEs).
fn msg_ring(ctx: &Ctx) -> io::Result<bool> {
    Ok(ctx.has_opcode(opcode::MsgRingData::CODE))
}

/// Registers a scratch ring's fd in this thread's table, then takes it out again. EBUSY
/// says the kernel has the feature and this thread's table is full (16): present, as the
/// answer is cached for every thread of the process (a driver on a full thread enters by
/// fd all the same).
fn registered_ring(_: &Ctx) -> io::Result<bool> {
    let ring = IoUring::new(SCRATCH_ENTRIES)?;
    let mut submitter = ring.submitter();
    match submitter.register_ring_fd() {
        Ok(()) => submitter.unregister_ring_fd().map(|()| true),
        Err(err) if err.raw_os_error() == Some(libc::EBUSY) => Ok(true),
        Err(err) => is_absent(err),
    }
}

fn no_sqarray(_: &Ctx) -> io::Result<bool> {
    try_setup(|b| {
        b.setup_no_sqarray();
    })
}

fn pbuf_ring(_: &Ctx) -> io::Result<bool> {
    try_buf_ring(0)
}

/// Kernels before 6.12 reject any nonzero flag they do not know with EINVAL.
fn pbuf_ring_inc(_: &Ctx) -> io::Result<bool> {
    try_buf_ring(IOU_PBUF_RING_INC)
}

/// Registers a two-entry buffer ring with `flags`, then unregisters it.
fn try_buf_ring(flags: u16) -> io::Result<bool> {
    let memory = PageMap::new()?;
    // Declared after `memory`, so the ring is closed before the memory is unmapped.
    let ring = IoUring::new(SCRATCH_ENTRIES)?;
    let addr = memory.addr as u64;
    // SAFETY: the ring lives in `memory`, a page-aligned mapping that outlives both the
    // registration (unregistered below) and the ring (dropped first); no op on this ring
    // selects a buffer, so the kernel never reads the ring's entries anyway.
    let registered = unsafe {
        let submitter = ring.submitter();
        submitter.register_buf_ring_with_flags(addr, BUF_RING_ENTRIES, BGID, flags)
    };
    match registered {
        Ok(()) => ring.submitter().unregister_buf_ring(BGID).map(|()| true),
        Err(err) => is_absent(err),
    }
}

/// One anonymous page: buffer rings must be page-aligned on older kernels.
struct PageMap {
    addr: *mut libc::c_void,
}

impl PageMap {
    fn new() -> io::Result<PageMap> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        // SAFETY: a new anonymous mapping at an address the kernel picks touches no existing
        // memory.
        let addr = unsafe { libc::mmap(ptr::null_mut(), PAGE_LEN, prot, flags, -1, 0) };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(PageMap { addr })
    }
}

impl Drop for PageMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; its only user, the scratch ring's
        // buffer registration, is gone (see `try_buf_ring`).
        unsafe { libc::munmap(self.addr, PAGE_LEN) };
    }
}

/// A multishot accept on a listener with a connection already queued must post the accepted
/// fd with `F_MORE`; kernels before 5.19 reject the flag (EINVAL) or ignore it (no `F_MORE`).
fn multishot_accept(ctx: &Ctx) -> io::Result<bool> {
    if !ctx.can_try_op(opcode::AcceptMulti::CODE) {
        return Ok(false);
    }
    let addr = SocketAddr::from_abstract_name(unique_name())?;
    let listener = UnixListener::bind_addr(&addr)?;
    let _client = UnixStream::connect_addr(&addr)?;
    let mut ring = IoUring::new(SCRATCH_ENTRIES)?;
    let accept = opcode::AcceptMulti::new(types::Fd(listener.as_raw_fd()));
    push(&mut ring, &accept.build().user_data(UD_OP))?;
    let cqes = reap_until(&mut ring, |c| c.user_data == UD_OP)?;
    close_accepted(&cqes);
    let first = first_op_cqe(&cqes)?;
    if let Err(err) = first.result() {
        return is_absent(err);
    }
    if !first.is_more() {
        return Ok(false);
    }
    // The feature is proven; a failed cancel only leaves the op to the ring's teardown.
    close_accepted(&cancel(&mut ring).unwrap_or_default());
    Ok(true)
}

/// A multishot poll of a socket with data waiting must post its event with `F_MORE`;
/// kernels before 5.13 reject the flag (EINVAL).
fn multishot_poll(ctx: &Ctx) -> io::Result<bool> {
    if !ctx.can_try_op(opcode::PollAdd::CODE) {
        return Ok(false);
    }
    let (rx, mut tx) = UnixStream::pair()?;
    tx.write_all(&PAYLOAD)?;
    let mut ring = IoUring::new(SCRATCH_ENTRIES)?;
    let poll = opcode::PollAdd::new(types::Fd(rx.as_raw_fd()), libc::POLLIN as u32);
    push(&mut ring, &poll.multi(true).build().user_data(UD_OP))?;
    let cqes = reap_until(&mut ring, |c| c.user_data == UD_OP)?;
    multishot_answer(&mut ring, first_op_cqe(&cqes)?)
}

/// A multishot trial's answer from its op's first CQE: absent if the kernel rejected the
/// op or posted it without `F_MORE` (it ignored the flag); else proven, and the op is
/// cancelled (a failed cancel only leaves it to the ring's teardown).
fn multishot_answer(ring: &mut IoUring, first: Cqe) -> io::Result<bool> {
    if let Err(err) = first.result() {
        return is_absent(err);
    }
    if !first.is_more() {
        return Ok(false);
    }
    let _ = cancel(ring);
    Ok(true)
}

/// An abstract socket name no other process uses: nothing on disk to clean up.
fn unique_name() -> Vec<u8> {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("ring-core-probe-{}-{nanos}", std::process::id()).into_bytes()
}

/// Closes the fds that successful accept CQEs handed us.
fn close_accepted(cqes: &[Cqe]) {
    for cqe in cqes.iter().filter(|c| c.user_data == UD_OP && c.res >= 0) {
        // SAFETY: a successful accept's result is a new fd that nothing else owns.
        drop(unsafe { OwnedFd::from_raw_fd(cqe.res) });
    }
}

/// A multishot recv with data already queued must post a buffer with `F_MORE`; kernels
/// before 6.0 reject the flag or ignore it. The buffer is lent with `PROVIDE_BUFFERS` (5.7),
/// which needs no ring memory of its own.
fn multishot_recv(ctx: &Ctx) -> io::Result<bool> {
    let can_provide = ctx.has_opcode(opcode::ProvideBuffers::CODE);
    if !ctx.can_try_op(opcode::RecvMulti::CODE) || !can_provide {
        return Ok(false);
    }
    let (rx, mut tx) = UnixStream::pair()?;
    tx.write_all(&PAYLOAD)?;
    let mut ring = IoUring::new(SCRATCH_ENTRIES)?;
    let mut buffer = LentBuf::new();
    let provide = opcode::ProvideBuffers::new(buffer.ptr.cast(), RECV_LEN as i32, 1, BGID, 0);
    push(&mut ring, &provide.build().user_data(UD_PROVIDE))?;
    let provided = reap_until(&mut ring, |c| c.user_data == UD_PROVIDE)?;
    if let Some(Err(err)) = provided
        .iter()
        .find(|c| c.user_data == UD_PROVIDE)
        .map(Cqe::result)
    {
        buffer.is_returned = true;
        return Err(err);
    }
    let recv = opcode::RecvMulti::new(types::Fd(rx.as_raw_fd()), BGID);
    push(&mut ring, &recv.build().user_data(UD_OP))?;
    let first = first_op_cqe(&reap_until(&mut ring, |c| c.user_data == UD_OP)?)?;
    // Either the CQE carries the buffer back, or the only op that could select it is over.
    buffer.is_returned = first.bid().is_some() || !first.is_more();
    multishot_answer(&mut ring, first)
}

/// A heap buffer lent to the kernel. Freed on drop only once `is_returned` is set; otherwise
/// leaked, because an op that may still write into it could outlive the trial.
struct LentBuf {
    ptr: *mut [u8; RECV_LEN],
    is_returned: bool,
}

impl LentBuf {
    fn new() -> LentBuf {
        let ptr = Box::into_raw(Box::new([0; RECV_LEN]));
        LentBuf {
            ptr,
            is_returned: false,
        }
    }
}

impl Drop for LentBuf {
    fn drop(&mut self) {
        if self.is_returned {
            // SAFETY: `ptr` came from `Box::into_raw` in `new`, and the kernel no longer holds it
            // (`is_returned`), so this is the only owner.
            drop(unsafe { Box::from_raw(self.ptr) });
        }
    }
}

/// A zero-copy send on a TCP socket must complete with the byte count and then post its
/// `F_NOTIF`; EOPNOTSUPP or EINVAL mean this kernel cannot.
fn send_zc(ctx: &Ctx) -> io::Result<bool> {
    if !ctx.can_try_op(opcode::SendZc::CODE) {
        return Ok(false);
    }
    let (tx, _rx) = tcp_pair()?;
    let mut ring = IoUring::new(SCRATCH_ENTRIES)?;
    let len = PAYLOAD.len() as u32;
    let send = opcode::SendZc::new(types::Fd(tx.as_raw_fd()), PAYLOAD.as_ptr(), len);
    push(&mut ring, &send.build().user_data(UD_OP))?;
    let is_last = |c: &Cqe| c.user_data == UD_OP && (c.is_notif() || !c.is_more());
    let cqes = reap_until(&mut ring, is_last)?;
    match first_op_cqe(&cqes)?.result() {
        Ok(sent) => Ok(sent == len && cqes.iter().any(Cqe::is_notif)),
        Err(err) => is_absent(err),
    }
}

/// A connected TCP pair on loopback: zero-copy send needs a TCP (or UDP) socket.
fn tcp_pair() -> io::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let tx = TcpStream::connect(listener.local_addr()?)?;
    let (rx, _) = listener.accept()?;
    Ok((tx, rx))
}

fn push(ring: &mut IoUring, sqe: &squeue::Entry) -> io::Result<()> {
    // SAFETY: every trial SQE points only at memory that outlives its op: the `static`
    // PAYLOAD, a `LentBuf` that leaks unless the kernel gave it back, or nothing at all.
    let pushed = unsafe { ring.submission().push(sqe) };
    pushed.map_err(|_| io::Error::from_raw_os_error(libc::EBUSY))
}

/// Cancels the multishot op `UD_OP` and collects CQEs up to its final one (no `F_MORE`).
fn cancel(ring: &mut IoUring) -> io::Result<Vec<Cqe>> {
    push(
        ring,
        &opcode::AsyncCancel::new(UD_OP).build().user_data(UD_CANCEL),
    )?;
    reap_until(ring, |c| c.user_data == UD_OP && !c.is_more())
}

fn first_op_cqe(cqes: &[Cqe]) -> io::Result<Cqe> {
    let first = cqes.iter().find(|c| c.user_data == UD_OP).copied();
    first.ok_or_else(|| io::Error::from_raw_os_error(libc::ETIME))
}

/// Submits what is queued and collects CQEs until one satisfies `is_done`; ETIME after
/// [`WAIT`]. Needs EXT_ARG (5.11) for the timed wait.
fn reap_until(ring: &mut IoUring, mut is_done: impl FnMut(&Cqe) -> bool) -> io::Result<Vec<Cqe>> {
    let deadline = Instant::now() + WAIT;
    let mut cqes = Vec::new();
    loop {
        let start = cqes.len();
        cqes.extend(ring.completion().map(|entry| Cqe::from(&entry)));
        if cqes[start..].iter().any(&mut is_done) {
            return Ok(cqes);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::from_raw_os_error(libc::ETIME));
        }
        let timeout = types::Timespec::from(left);
        let args = types::SubmitArgs::new().timespec(&timeout);
        match ring.submitter().submit_with_args(1, &args) {
            // ETIME: the wait timed out (the deadline check above decides); EINTR: a signal.
            Err(err) if !matches!(err.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {
                return Err(err)
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trials_cover_every_flag_level_feature() {
        let tried = |f: Feature| TRIALS.iter().any(|&(g, _)| g == f);
        for &f in Feature::ALL {
            assert_ne!(f.feat_bit().is_some(), tried(f), "{}", f.name());
        }
    }

    /// Found by review AE: a thread whose table of registered rings is full (16) made the
    /// trial answer EBUSY, which turned the feature off for every thread of the process.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn registered_ring_is_present_on_a_thread_whose_table_is_full() {
        let ctx = Ctx {
            feat_raw: 0,
            opcodes: 0,
        };
        let mut rings = Vec::new();
        loop {
            let ring = match IoUring::new(SCRATCH_ENTRIES) {
                Ok(ring) => ring,
                Err(err) => return eprintln!("SKIPPED: io_uring_setup failed: {err}"),
            };
            match ring.submitter().register_ring_fd() {
                Ok(()) => rings.push(ring),
                Err(err) if err.raw_os_error() == Some(libc::EBUSY) => break,
                Err(err) => return eprintln!("SKIPPED: no registered rings here: {err}"),
            }
        }
        assert_eq!(rings.len(), 16, "a thread's table holds 16 rings");
        assert!(registered_ring(&ctx).expect("the trial answers"));
        // The registrations end with this test's thread.
    }

    #[test]
    fn inferred_opcodes_follow_the_version() {
        let opcodes = infer_opcodes("5.5.0-generic");
        assert_ne!(opcodes & opcode_bit(opcode::Accept::CODE), 0);
        assert_eq!(opcodes & opcode_bit(opcode::OpenAt::CODE), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn feat_bits_match_the_crate_predicates() {
        let ring = match IoUring::new(SCRATCH_ENTRIES) {
            Ok(ring) => ring,
            Err(err) => return eprintln!("SKIPPED: io_uring_setup failed: {err}"),
        };
        let params = ring.params();
        let bits = feat_bits(params);
        assert_eq!(bits & 1 != 0, params.is_feature_single_mmap());
        assert_eq!(bits & (1 << 8) != 0, params.is_feature_ext_arg());
        assert_eq!(bits & (1 << 5) != 0, params.is_feature_fast_poll());
    }
}
