//! Taking a [`FixedBuf`] from the current worker's registered pool.

use std::io;

use crate::buf::FixedBuf;
use crate::worker::Core;

impl FixedBuf {
    /// Takes a free buffer from this worker's pool (see
    /// [`Builder::fixed_buffers`](crate::Builder::fixed_buffers)), empty, with the pool's
    /// buffer length as its capacity. Dropping it gives it back.
    ///
    /// # Errors
    /// Outside a runtime (`Other`, as any I/O call there); in a runtime built without
    /// `fixed_buffers` (`Unsupported`); when
    /// every buffer of the pool is out (`WouldBlock`); when the pool's memory cannot be
    /// allocated on first use (`OutOfMemory`).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_rt::buf::FixedBuf;
    ///
    /// let rt = ring_rt::Runtime::builder().threads(1).fixed_buffers(1, 512).build()?;
    /// rt.block_on(async {
    ///     let first = FixedBuf::take()?;
    ///     let none_left = FixedBuf::take().unwrap_err();
    ///     assert_eq!(none_left.kind(), std::io::ErrorKind::WouldBlock);
    ///     drop(first);
    ///     FixedBuf::take()?; // back in the pool
    ///     std::io::Result::Ok(())
    /// })?;
    /// # std::io::Result::Ok(())
    /// ```
    pub fn take() -> io::Result<FixedBuf> {
        let core = Core::current_io()?;
        let (pool, registered) = core.fixed_buffers()?;
        let chunk = pool.alloc().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "all {} fixed buffers of this worker are out: drop one, or size the pool \
                     with Builder::fixed_buffers",
                    pool.count()
                ),
            )
        })?;
        Ok(FixedBuf::new(chunk, registered))
    }
}
