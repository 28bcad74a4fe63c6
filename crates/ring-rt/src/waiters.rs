//! Wakers waiting on one thing, inline while there is at most one of them. A leaf: both
//! the backends (an fd's readiness) and the op layer (a socket's receive turn) use it.

use std::task::Waker;

/// Who waits: a number the waiter keeps for as long as it waits (a receive's place in
/// line, an epoll wait's number), never handed to another waiter of the same thing.
/// Polled again, the waiter's waker replaces the one it left; done or dropped, it takes
/// its waker out ([`Waiters::remove`]). So a waiter polled with a thousand different wakers
/// leaves one, and a dropped one leaves none (review AJ: every waker polled was kept until
/// the next wake, and a finished task's waker woken long after).
pub(crate) type WaiterKey = u64;

/// Waiters without a key of their own (dropped accepts' followers, which wait briefly and
/// are all woken together): deduplicated by the task they wake only.
pub(crate) const ANONYMOUS: WaiterKey = 0;

/// Wakers waiting on one thing (a socket's turn, an fd's readiness): nearly always none or
/// one, kept inline so an idle connection allocates nothing for them.
///
/// Three words: the one waiter's key beside a slot of two. A waker's only niche is its
/// vtable pointer's null, which can stand for one other variant, not two: with a variant
/// for "none" as well, the slot took three words and the whole four. So "none" is the slot
/// holding the no-op waker under [`EMPTY`], a key no waiter gets.
pub(crate) struct Waiters {
    /// The key of the waker in `Slot::One`; [`EMPTY`] when nobody waits.
    key: WaiterKey,
    slot: Slot,
}

/// The key of an empty [`Waiters`]: the keys handed out count up from 1 and never get here.
const EMPTY: WaiterKey = WaiterKey::MAX;

enum Slot {
    One(Waker),
    /// Boxed: rare, and a `Vec` inline would make every socket's waiters a word larger.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<(WaiterKey, Waker)>>),
}

impl Default for Waiters {
    fn default() -> Waiters {
        Waiters {
            key: EMPTY,
            slot: Slot::One(Waker::noop().clone()),
        }
    }
}

impl Waiters {
    /// Parks `waker` for `key`: the waker `key` left before is replaced (unless it wakes
    /// the same task) and returned, for the caller to drop where a waker's drop (code that
    /// is not ours) cannot reach back into what it borrows. An [`ANONYMOUS`] waker is added
    /// unless one that wakes the same task is here already.
    #[must_use = "a replaced waker is dropped by the caller, outside its borrows"]
    pub(crate) fn add(&mut self, key: WaiterKey, waker: &Waker) -> Option<Waker> {
        if self.has(key, waker) {
            return None;
        }
        self.put(key, waker.clone())
    }

    /// Whether `key` waits here with a waker that wakes the same task as `waker` (runs no
    /// code that is not ours: a caller holding a borrow can ask, then clone outside it).
    pub(crate) fn has(&self, key: WaiterKey, waker: &Waker) -> bool {
        let same = |k: WaiterKey, w: &Waker| k == key && w.will_wake(waker);
        match &self.slot {
            _ if self.is_empty() => false,
            Slot::One(w) => same(self.key, w),
            Slot::Many(ws) => ws.iter().any(|(k, w)| same(*k, w)),
        }
    }

    /// [`add`](Self::add) with the waker cloned already (by a caller that must not run a
    /// clone, code that is not ours, under its borrow). Runs no code that is not ours.
    #[must_use = "a replaced waker is dropped by the caller, outside its borrows"]
    pub(crate) fn put(&mut self, key: WaiterKey, waker: Waker) -> Option<Waker> {
        debug_assert!(key != EMPTY, "a waiter's key is never the empty mark");
        let same = |k: WaiterKey, w: &Waker| {
            if key == ANONYMOUS {
                k == ANONYMOUS && w.will_wake(&waker)
            } else {
                k == key
            }
        };
        let empty = self.is_empty();
        let found = match &mut self.slot {
            Slot::One(_) if empty => None,
            Slot::One(w) => same(self.key, w).then_some(w),
            Slot::Many(ws) => ws.iter_mut().find(|(k, w)| same(*k, w)).map(|(_, w)| w),
        };
        if let Some(parked) = found {
            // The waker not kept (either one) goes to the caller.
            if parked.will_wake(&waker) {
                return Some(waker);
            }
            return Some(std::mem::replace(parked, waker));
        }
        if empty {
            // The no-op waker goes; its drop does nothing.
            self.key = key;
            self.slot = Slot::One(waker);
            return None;
        }
        match &mut self.slot {
            Slot::Many(ws) => ws.push((key, waker)),
            Slot::One(_) => {
                let Slot::One(first) =
                    std::mem::replace(&mut self.slot, Slot::Many(Box::default()))
                else {
                    unreachable!("just matched one waiter")
                };
                let first = (std::mem::replace(&mut self.key, EMPTY), first);
                self.slot = Slot::Many(Box::new(vec![first, (key, waker)]));
            }
        }
        None
    }

    /// Takes out the waker `key` left, if it is still here (returned, for the caller to
    /// drop where that is safe).
    pub(crate) fn remove(&mut self, key: WaiterKey) -> Option<Waker> {
        if key == EMPTY {
            return None;
        }
        match &mut self.slot {
            Slot::One(_) if self.key == key => Some(self.take_one()),
            Slot::Many(ws) => {
                let at = ws.iter().position(|(k, _)| *k == key)?;
                let (_, waker) = ws.swap_remove(at);
                if ws.len() <= 1 {
                    let last = ws.pop();
                    *self = Waiters::default();
                    if let Some((k, w)) = last {
                        self.key = k;
                        self.slot = Slot::One(w);
                    }
                }
                Some(waker)
            }
            Slot::One(_) => None,
        }
    }

    /// The one waker, leaving these empty.
    fn take_one(&mut self) -> Waker {
        match std::mem::take(self).slot {
            Slot::One(w) => w,
            Slot::Many(_) => unreachable!("called with one waiter"),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.key == EMPTY && matches!(self.slot, Slot::One(_))
    }

    /// How many wakers wait.
    #[cfg(test)]
    fn len(&self) -> usize {
        match &self.slot {
            _ if self.is_empty() => 0,
            Slot::One(_) => 1,
            Slot::Many(ws) => ws.len(),
        }
    }
}

impl IntoIterator for Waiters {
    type Item = Waker;
    type IntoIter = Drain;

    /// The wakers, without an allocation for the usual one.
    fn into_iter(self) -> Drain {
        if self.is_empty() {
            return Drain::One(None);
        }
        match self.slot {
            Slot::One(w) => Drain::One(Some(w)),
            Slot::Many(ws) => Drain::Many((*ws).into_iter()),
        }
    }
}

/// The wakers of a [`Waiters`], taken out.
pub(crate) enum Drain {
    One(Option<Waker>),
    Many(std::vec::IntoIter<(WaiterKey, Waker)>),
}

impl Iterator for Drain {
    type Item = Waker;

    fn next(&mut self) -> Option<Waker> {
        match self {
            Drain::One(w) => w.take(),
            Drain::Many(ws) => ws.next().map(|(_, w)| w),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;

    struct Flag;
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {}
    }

    fn waker() -> (Arc<Flag>, Waker) {
        let flag = Arc::new(Flag);
        (flag.clone(), Waker::from(flag))
    }

    #[test]
    fn a_key_keeps_its_last_waker_only() {
        let mut waiters = Waiters::default();
        let flags: Vec<_> = (0..100)
            .map(|_| {
                let (flag, w) = waker();
                drop(waiters.add(7, &w));
                flag
            })
            .collect();
        assert_eq!(waiters.len(), 1);
        let kept = flags.iter().filter(|f| Arc::strong_count(f) > 1).count();
        assert_eq!(kept, 1);
        assert!(Arc::strong_count(flags.last().unwrap()) > 1);
    }

    #[test]
    fn keys_wait_apart_and_leave_apart() {
        let mut waiters = Waiters::default();
        let (_a, wa) = waker();
        let (_b, wb) = waker();
        let (_c, wc) = waker();
        assert!(waiters.add(1, &wa).is_none());
        assert!(waiters.add(2, &wb).is_none());
        assert!(waiters.add(3, &wc).is_none());
        assert_eq!(waiters.len(), 3);
        assert!(waiters.remove(2).is_some_and(|w| w.will_wake(&wb)));
        assert!(waiters.remove(2).is_none());
        assert_eq!(waiters.len(), 2);
        assert!(waiters.remove(1).is_some());
        assert!(matches!(waiters.slot, Slot::One(_)) && waiters.key == 3);
        assert!(waiters.remove(3).is_some());
        assert!(waiters.is_empty());
    }

    #[test]
    fn anonymous_waiters_are_kept_per_task() {
        let mut waiters = Waiters::default();
        let (_a, wa) = waker();
        let (_b, wb) = waker();
        assert!(waiters.add(ANONYMOUS, &wa).is_none());
        assert!(waiters.add(ANONYMOUS, &wa.clone()).is_none());
        assert!(waiters.add(ANONYMOUS, &wb).is_none());
        assert_eq!(waiters.len(), 2);
        assert_eq!(waiters.into_iter().count(), 2);
    }

    #[test]
    fn waiters_stay_three_words() {
        assert!(std::mem::size_of::<Waiters>() <= 24);
    }
}
