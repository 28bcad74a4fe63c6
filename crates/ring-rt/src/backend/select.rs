//! Choosing the backend at run time, building it, and saying why: the one place that
//! decides which backend a worker runs.
//!
//! io_uring unless ring setup fails (ENOSYS, EPERM, ENOMEM, ...) or the kernel (or the
//! feature profile) lacks an opcode the runtime needs; then epoll. `RING_RT_BACKEND` or
//! `Builder::backend` forces one; forcing io_uring where it is unavailable is an error.

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use io_uring::opcode;
use ring_core::driver::DriverConfig;
use ring_core::probe::{opcode_name, opcode_since, FeatureMask, Features};
use ring_core::setup::{RingConfig, SetupError};

use super::epoll::EpollBackend;
use super::uring::UringBackend;
use super::{blocking, Backend, BackendKind, FixedBuffers, RecvBuffers};

/// What a worker's backend is built from (the builder's settings that concern it).
#[derive(Clone, Debug)]
pub(crate) struct BackendConfig {
    /// The backend asked for (`Builder::backend` or `RING_RT_BACKEND`), if any.
    pub(crate) requested: Option<BackendKind>,
    /// A feature profile to mask the probed features with (`RING_FEATURES`).
    pub(crate) mask: Option<FeatureMask>,
    pub(crate) ring: RingConfig,
    pub(crate) recv_buffers: RecvBuffers,
    pub(crate) fixed_buffers: FixedBuffers,
    /// Where the blocking pool's threads run (see `sys::HelperCpus`).
    pub(crate) helper_cpus: crate::sys::HelperCpus,
    pub(crate) batch_wait: Duration,
    /// The blocking-thread cap the builder set, if it set one.
    pub(crate) blocking_threads: Option<usize>,
    /// Direct-descriptor slots per ring (`Builder::direct_descriptors`); 0 for none.
    pub(crate) direct_slots: u32,
}

/// How other threads wake a worker: the eventfd they write, and what each backend calls
/// to reset it once it fired (made anew for each backend tried).
pub(crate) struct WakeSource<'a> {
    pub(crate) fd: RawFd,
    pub(crate) on_wake: &'a dyn Fn() -> Box<dyn Fn()>,
}

/// Chooses and builds a worker's backend: io_uring where it is usable, else epoll; a
/// ring whose setup fails after a successful probe (memlock, ...) falls back too, unless
/// io_uring was requested.
pub(crate) fn open(config: &BackendConfig, wake: WakeSource<'_>) -> io::Result<(Backend, Choice)> {
    let choice = choose(config.requested, config.mask.as_ref())?;
    let Some(features) = choice.features.clone() else {
        return open_epoll(config, wake, choice);
    };
    let driver = DriverConfig {
        ring: config.ring.clone(),
        features,
    };
    let blocking_threads = config
        .blocking_threads
        .unwrap_or_else(blocking::default_threads);
    let is_explicit = config.blocking_threads.is_some();
    let uring = UringBackend::new(
        &driver,
        wake.fd,
        (wake.on_wake)(),
        config.recv_buffers,
        config.fixed_buffers,
    );
    match uring {
        Ok(b) => {
            let b = b
                .with_batch_wait(config.batch_wait)
                .with_blocking_threads(blocking_threads, is_explicit)
                .with_direct_descriptors(config.direct_slots);
            Ok((Backend::Uring(b), choice))
        }
        Err(err) if config.requested == Some(BackendKind::Uring) => Err(err.into()),
        Err(err) => open_epoll(config, wake, setup_failed(err)),
    }
}

fn open_epoll(
    config: &BackendConfig,
    wake: WakeSource<'_>,
    choice: Choice,
) -> io::Result<(Backend, Choice)> {
    let threads = config
        .blocking_threads
        .unwrap_or_else(blocking::default_threads);
    let epoll = EpollBackend::new(
        wake.fd,
        (wake.on_wake)(),
        config.recv_buffers,
        config.fixed_buffers,
        threads,
        config.helper_cpus.clone(),
    )?;
    Ok((Backend::Epoll(epoll), choice))
}

/// Opcodes every io_uring op of ring-rt relies on: the 5.6 set (sockets, files, cancel).
const REQUIRED_OPCODES: &[u8] = &[
    opcode::PollAdd::CODE,
    opcode::Timeout::CODE,
    opcode::Accept::CODE,
    opcode::AsyncCancel::CODE,
    opcode::LinkTimeout::CODE,
    opcode::Connect::CODE,
    opcode::Read::CODE,
    opcode::Write::CODE,
    opcode::Send::CODE,
    opcode::Recv::CODE,
    opcode::OpenAt::CODE,
    opcode::Close::CODE,
    opcode::Statx::CODE,
    opcode::Fsync::CODE,
];

/// Which backend a runtime runs and why: readable from [`crate::Runtime::backend`].
///
/// # Examples
///
/// ```
/// let rt = ring_rt::Runtime::new()?;
/// let choice = rt.backend();
/// // e.g. "uring (io_uring available)", or "epoll (io_uring unavailable: ...)".
/// println!("{choice}");
/// if choice.is_fallback() {
///     let fix = choice.setup_error.as_ref().map(|e| e.fix());
///     eprintln!("io_uring not used: {} (fix: {fix:?})", choice.reason);
/// }
/// # std::io::Result::Ok(())
/// ```
#[derive(Clone, Debug)]
pub struct BackendChoice {
    /// The backend in use.
    pub kind: BackendKind,
    /// Why: "requested", "io_uring available", or the reason io_uring was not used.
    pub reason: String,
    /// The ring setup error, when io_uring could not be set up.
    pub setup_error: Option<SetupError>,
}

impl BackendChoice {
    /// True when this is the epoll fallback because io_uring was unusable (not when epoll
    /// was requested).
    ///
    /// # Examples
    ///
    /// A feature profile older than 5.6 lacks opcodes the io_uring backend needs, so the
    /// runtime falls back; asking for epoll is not a fallback:
    ///
    /// ```
    /// use ring_rt::{BackendKind, FeatureMask, Runtime};
    ///
    /// let rt = Runtime::builder().feature_mask(FeatureMask::parse("5.5").unwrap()).build()?;
    /// # if std::env::var("RING_RT_BACKEND").as_deref() != Ok("epoll") {
    /// assert!(rt.backend().is_fallback());
    /// # }
    /// assert_eq!(rt.backend().kind, BackendKind::Epoll);
    ///
    /// let rt = Runtime::builder().backend(BackendKind::Epoll).build()?;
    /// assert!(!rt.backend().is_fallback());
    /// # std::io::Result::Ok(())
    /// ```
    pub fn is_fallback(&self) -> bool {
        self.kind == BackendKind::Epoll && self.setup_error.is_some()
            || self.reason.starts_with("io_uring lacks")
    }
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.kind, self.reason)
    }
}

/// The decision plus what the chosen backend is built from.
pub(crate) struct Choice {
    pub(crate) kind: BackendKind,
    pub(crate) report: BackendChoice,
    /// Masked features when io_uring was chosen.
    pub(crate) features: Option<Features>,
}

/// Reads `RING_RT_BACKEND` (absent or empty: no preference).
pub(crate) fn backend_from_env() -> io::Result<Option<BackendKind>> {
    match std::env::var("RING_RT_BACKEND") {
        Ok(v) if !v.trim().is_empty() => BackendKind::parse(&v).map(Some).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("RING_RT_BACKEND={v:?}: expected \"uring\" or \"epoll\""),
            )
        }),
        _ => Ok(None),
    }
}

/// Decides the backend for a runtime.
fn choose(requested: Option<BackendKind>, mask: Option<&FeatureMask>) -> io::Result<Choice> {
    if requested == Some(BackendKind::Epoll) {
        return Ok(epoll("requested".into(), None));
    }
    let probed = match Features::probe() {
        Ok(f) => f,
        Err(err) if requested == Some(BackendKind::Uring) => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("io_uring was requested but is unavailable: {err}"),
            ))
        }
        Err(err) => {
            return Ok(epoll(
                format!("io_uring unavailable: {err}"),
                Some(err.clone()),
            ))
        }
    };
    let features = match mask {
        Some(mask) => probed.masked(mask),
        None => probed.clone(),
    };
    if let Some(missing) = missing_opcodes(&features) {
        let reason = format!("io_uring lacks opcodes ring-rt needs: {missing}");
        if requested == Some(BackendKind::Uring) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("io_uring was requested but {reason}"),
            ));
        }
        return Ok(epoll(reason, None));
    }
    let reason = if requested.is_some() {
        "requested"
    } else {
        "io_uring available"
    };
    Ok(Choice {
        kind: BackendKind::Uring,
        report: BackendChoice {
            kind: BackendKind::Uring,
            reason: reason.into(),
            setup_error: None,
        },
        features: Some(features),
    })
}

/// Records that ring setup itself failed after probing succeeded (e.g. memlock).
fn setup_failed(err: SetupError) -> Choice {
    epoll(format!("io_uring ring setup failed: {err}"), Some(err))
}

fn epoll(reason: String, setup_error: Option<SetupError>) -> Choice {
    Choice {
        kind: BackendKind::Epoll,
        report: BackendChoice {
            kind: BackendKind::Epoll,
            reason,
            setup_error,
        },
        features: None,
    }
}

fn missing_opcodes(features: &Features) -> Option<String> {
    let missing: Vec<String> = REQUIRED_OPCODES
        .iter()
        .filter(|&&op| !features.has_opcode(op))
        .map(|&op| {
            let since = opcode_since(op).map_or("?".into(), |v| v.to_string());
            format!("{} ({since}+)", opcode_name(op))
        })
        .collect();
    (!missing.is_empty()).then(|| missing.join(", "))
}
