//! What a worker's response futures share: its handle on the engine, and boxes they reuse for
//! the parts only some requests need (the work left for the response: the RateLimit fields and
//! failure quotas; the deadline's timer, armed only when the app does not answer at once).
//! Out of the future, those parts keep it small enough for actix to move without a copy loop;
//! reused, their boxes cost a worker no allocation once it has had as many such requests at
//! once as it keeps.

use super::after::AfterResponse;
use crate::engine::WorkerEngine;
use pin_project_lite::pin_project;
use std::cell::{RefCell, RefMut};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Most boxes of each kind a worker keeps for reuse (more at once are allocated and freed).
const KEPT: usize = 256;

/// How far ahead a kept timer is parked: it neither fires nor holds a task meanwhile.
const PARKED: Duration = Duration::from_secs(24 * 3600);

/// One worker's share of its response futures.
pub(crate) struct Worker {
    pub(super) engine: Rc<WorkerEngine>,
    // Boxes, not the values: a response future holds the box, and gives it back.
    #[allow(clippy::vec_box)]
    afters: RefCell<Vec<Box<Option<AfterResponse>>>>,
    timers: RefCell<Vec<Pin<Box<Timer>>>>,
}

pin_project! {
    /// A request's deadline timer, and the deadline it was armed with.
    pub(super) struct Timer {
        #[pin]
        sleep: Sleep,
        after: Duration,
    }
}

impl Timer {
    /// The deadline once it has passed.
    pub(super) fn poll_passed(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Duration> {
        let this = self.project();
        std::task::ready!(this.sleep.poll(cx));
        Poll::Ready(*this.after)
    }
}

impl Worker {
    pub(super) fn new(engine: Rc<WorkerEngine>) -> Self {
        Self {
            engine,
            afters: RefCell::default(),
            timers: RefCell::default(),
        }
    }

    /// `after` in a box, reused if one is kept.
    pub(super) fn after(&self, after: AfterResponse) -> Box<Option<AfterResponse>> {
        match reuse(&self.afters) {
            Some(mut reused) => {
                *reused = Some(after);
                reused
            }
            None => Box::new(Some(after)),
        }
    }

    /// Keeps `boxed` for reuse (emptied first: what it held is dropped now).
    pub(super) fn give_after(&self, mut boxed: Box<Option<AfterResponse>>) {
        *boxed = None;
        if let Some(mut kept) = room(&self.afters) {
            kept.push(boxed);
        }
    }

    /// A timer that passes `after` from now, reused if one is kept.
    pub(super) fn timer(&self, after: Duration) -> Pin<Box<Timer>> {
        let deadline = Instant::now() + after;
        match reuse(&self.timers) {
            Some(mut reused) => {
                let this = reused.as_mut().project();
                this.sleep.reset(deadline);
                *this.after = after;
                reused
            }
            None => Box::pin(Timer {
                sleep: tokio::time::sleep_until(deadline),
                after,
            }),
        }
    }

    /// Keeps `timer` for reuse, parked far ahead and holding no task's waker (the task it
    /// last woke may be gone). A timer that cannot be parked (its runtime is shutting down)
    /// is dropped.
    pub(super) fn give_timer(&self, mut timer: Pin<Box<Timer>>) {
        let Some(mut kept) = room(&self.timers) else {
            return;
        };
        let parked = catch_unwind(AssertUnwindSafe(|| {
            let mut sleep = timer.as_mut().project().sleep;
            sleep.as_mut().reset(Instant::now() + PARKED);
            let _ = sleep.poll(&mut Context::from_waker(Waker::noop()));
        }));
        if parked.is_ok() {
            kept.push(timer);
        }
    }
}

/// A box kept in `kept`, if any (and `kept` is not in use further up this worker's stack).
fn reuse<T>(kept: &RefCell<Vec<T>>) -> Option<T> {
    kept.try_borrow_mut().ok()?.pop()
}

/// `kept`, if it has room for one more box.
fn room<T>(kept: &RefCell<Vec<T>>) -> Option<RefMut<'_, Vec<T>>> {
    kept.try_borrow_mut().ok().filter(|kept| kept.len() < KEPT)
}
