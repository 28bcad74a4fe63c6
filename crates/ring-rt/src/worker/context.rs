//! The thread-local through which futures on a worker's thread find their worker's core
//! (kept apart from the core, as tokio keeps its context: the one piece of global state).

use std::cell::RefCell;
use std::io;
use std::rc::Rc;

use super::Core;

thread_local! {
    static CURRENT: RefCell<Option<Rc<Core>>> = const { RefCell::new(None) };
}

impl Core {
    /// The core of the runtime running on this thread (`None` outside one, and while the
    /// thread's locals are being destroyed).
    pub(crate) fn current() -> Option<Rc<Core>> {
        CURRENT.try_with(|c| c.borrow().clone()).ok().flatten()
    }

    /// Like [`current`](Self::current), as an `io::Error` for I/O entry points.
    pub(crate) fn current_io() -> io::Result<Rc<Core>> {
        Core::current().ok_or_else(|| {
            io::Error::other("no ring-rt runtime on this thread: call this inside Runtime::block_on or a spawned task")
        })
    }
}

/// Whether `core` is this thread's current one.
pub(super) fn is_current(core: &Core) -> bool {
    let here = CURRENT
        .try_with(|c| c.borrow().as_ref().map(Rc::as_ptr))
        .ok()
        .flatten();
    here == Some(core as *const Core)
}

/// Installs a core as this thread's current one, restoring the previous on drop. While the
/// thread's locals are being destroyed (a runtime kept in a `thread_local!` is dropped at
/// thread exit) there is no current core to install: the guard does nothing then.
pub(crate) struct CurrentGuard(Option<Option<Rc<Core>>>);

impl CurrentGuard {
    pub(crate) fn set(core: Rc<Core>) -> CurrentGuard {
        CurrentGuard(CURRENT.try_with(|c| c.borrow_mut().replace(core)).ok())
    }
}

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        if let Some(previous) = self.0.take() {
            let _ = CURRENT.try_with(|c| *c.borrow_mut() = previous);
        }
    }
}
