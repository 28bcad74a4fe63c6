//! `IntoFdError`: a socket that could not be given up as a plain fd without losing data.

use std::error::Error;
use std::fmt;
use std::io;

/// The error of [`TcpStream::into_owned_fd`](super::TcpStream::into_owned_fd): the socket
/// comes back, because giving its fd up now would lose received data (bytes a dropped read
/// got, still queued on the socket, or a dropped read still finishing in the kernel). Read
/// the queued data, or let the runtime run a turn, and try again. As
/// [`std::io::IntoInnerError`] does for a `BufWriter`.
pub struct IntoFdError<T> {
    value: T,
    error: io::Error,
}

impl<T> IntoFdError<T> {
    pub(crate) fn new(value: T, error: io::Error) -> IntoFdError<T> {
        IntoFdError { value, error }
    }

    /// Why the fd could not be given up (`ErrorKind::ResourceBusy`).
    pub fn error(&self) -> &io::Error {
        &self.error
    }

    /// The socket, unchanged.
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T> fmt::Debug for IntoFdError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntoFdError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Display for IntoFdError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot give up the socket's fd yet: {}", self.error)
    }
}

impl<T> Error for IntoFdError<T> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.error)
    }
}

impl<T> From<IntoFdError<T>> for io::Error {
    fn from(e: IntoFdError<T>) -> io::Error {
        e.error
    }
}
