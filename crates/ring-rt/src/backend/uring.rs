//! The io_uring backend: a ring-core driver plus the worker's wake-up poll and buffer group.

use std::io;
use std::os::fd::RawFd;
use std::task::Waker;

use io_uring::{opcode, types};
use ring_core::buf_pool::BufGroup;
use ring_core::driver::{Driver, DriverConfig, Wait};
use ring_core::release::Keep;
use ring_core::setup::SetupError;
use ring_core::user_data::OpId;

/// Provided-buffer sizing for a worker's shared receive group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvBuffers {
    pub(crate) count: u16,
    pub(crate) len: u32,
}

pub(crate) struct UringBackend {
    pub(crate) driver: Driver,
    /// The eventfd other threads write to wake this worker.
    wake_fd: RawFd,
    /// The armed poll on `wake_fd`, if any.
    wake_op: Option<OpId>,
    recv_buffers: RecvBuffers,
    recv_group: Option<BufGroup>,
    /// Called when the eventfd fired, to reset it.
    on_wake: Box<dyn Fn()>,
}

impl UringBackend {
    pub(crate) fn new(
        config: &DriverConfig,
        wake_fd: RawFd,
        on_wake: Box<dyn Fn()>,
        recv_buffers: RecvBuffers,
    ) -> Result<UringBackend, SetupError> {
        Ok(UringBackend {
            driver: Driver::new(config)?,
            wake_fd,
            wake_op: None,
            recv_buffers,
            recv_group: None,
            on_wake,
        })
    }

    pub(crate) fn turn(&mut self, wait: Wait) -> io::Result<()> {
        if self.wake_op.is_none() {
            let poll = opcode::PollAdd::new(types::Fd(self.wake_fd), libc::POLLIN as u32);
            self.wake_op = Some(self.driver.submit_op(poll.build())?);
        }
        self.driver.turn(wait)?;
        if let Some(id) = self.wake_op {
            if self.driver.poll_op(id, Waker::noop()).is_ready() {
                self.wake_op = None;
                (self.on_wake)();
            }
        }
        Ok(())
    }

    pub(crate) fn recv_group_ref(&self) -> Option<&BufGroup> {
        self.recv_group.as_ref()
    }

    pub(crate) fn recv_group(&mut self) -> io::Result<BufGroup> {
        if let Some(group) = &self.recv_group {
            return Ok(group.clone());
        }
        let RecvBuffers { count, len } = self.recv_buffers;
        let group = match self.driver.register_buf_group(count, len) {
            Ok(group) => group,
            // Before 5.7 the kernel cannot select buffers: select them in user space after
            // a readiness poll, as the epoll backend does (still no buffer per idle socket).
            Err(e) if e.kind() == io::ErrorKind::Unsupported => BufGroup::new_user(0, count, len)?,
            Err(e) => return Err(e),
        };
        self.recv_group = Some(group.clone());
        Ok(group)
    }
}

impl Drop for UringBackend {
    fn drop(&mut self) {
        // The wake poll has no future: orphan it so the driver's shutdown can reap it.
        if let Some(id) = self.wake_op.take() {
            self.driver.orphan(id, Box::new(Keep(())));
        }
    }
}
