//! Wakers waiting on one thing, inline while there are at most one of them. A leaf: both
//! the backends (an fd's readiness) and the op layer (a socket's receive turn) use it.

use std::task::Waker;

/// Wakers waiting on one thing (a socket's turn, an fd's readiness): nearly always none or
/// one, kept inline so an idle connection allocates nothing for them. A waker that would
/// wake the same task as one already here is not added twice.
#[derive(Default)]
pub(crate) enum Waiters {
    #[default]
    None,
    One(Waker),
    Many(Vec<Waker>),
}

impl Waiters {
    fn has(&self, waker: &Waker) -> bool {
        match self {
            Waiters::None => false,
            Waiters::One(w) => w.will_wake(waker),
            Waiters::Many(ws) => ws.iter().any(|w| w.will_wake(waker)),
        }
    }

    /// Adds a clone of `waker`, unless one that wakes the same task is here already.
    pub(crate) fn add(&mut self, waker: &Waker) {
        if self.has(waker) {
            return;
        }
        let waker = waker.clone();
        *self = match std::mem::take(self) {
            Waiters::None => Waiters::One(waker),
            Waiters::One(first) => Waiters::Many(vec![first, waker]),
            Waiters::Many(mut ws) => {
                ws.push(waker);
                Waiters::Many(ws)
            }
        };
    }

    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, Waiters::None)
    }

    /// How many wakers wait.
    pub(crate) fn len(&self) -> usize {
        match self {
            Waiters::None => 0,
            Waiters::One(_) => 1,
            Waiters::Many(ws) => ws.len(),
        }
    }
}

impl IntoIterator for Waiters {
    type Item = Waker;
    type IntoIter = std::vec::IntoIter<Waker>;

    fn into_iter(self) -> Self::IntoIter {
        match self {
            Waiters::None => Vec::new().into_iter(),
            Waiters::One(w) => vec![w].into_iter(),
            Waiters::Many(ws) => ws.into_iter(),
        }
    }
}
