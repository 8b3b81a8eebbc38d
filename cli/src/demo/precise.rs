//! The demo's sleep, precise to about a tenth of a millisecond.
//!
//! tokio's timer wakes on whole milliseconds, late: on the 2-core VM a 10 ms sleep took
//! 11.2 ms on average and a 1 ms one 2.1 ms. A demo worker held for "10 ms" was then held
//! 12% longer, so the app served 179 requests a second where its configuration (and
//! `bench overload`'s C) said 200, and no shedder could score more than 90% of C on it. Here
//! one thread keeps every sleeping request's deadline and wakes each at its time: it parks
//! until the earliest, less how late its parks have been waking (learned as it goes).

use brownout::clock::Clock;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::oneshot;

/// The most a deadline fires before its time: how late a park wakes, learned, and capped
/// here so that a slow stretch of the machine cannot make every sleep short.
pub const MAX_EARLY: Duration = Duration::from_micros(500);

/// Shared by the demo's workers (in an `Arc`); its thread ends when it is dropped.
pub struct PreciseTimer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for PreciseTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreciseTimer").finish_non_exhaustive()
    }
}

struct Shared {
    queue: Mutex<Queue>,
    /// The clock deadlines are read on (the system's: the thread parks for real).
    clock: Arc<dyn Clock>,
}

#[derive(Debug, Default)]
struct Queue {
    due: BinaryHeap<Due>,
    /// Deadlines queued so far (ties keep their order).
    queued: u64,
    /// The timer was dropped: its thread ends.
    closed: bool,
}

/// One sleeper: when (on the timer's clock), and how to wake it.
#[derive(Debug)]
struct Due {
    at: Duration,
    seq: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    /// Reversed: the earliest deadline is the heap's greatest.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl PreciseTimer {
    /// Starts the timer's thread, reading time on `clock` (the system's: it parks for real).
    ///
    /// # Panics
    /// Where the OS refuses a thread (the demo cannot run then).
    pub fn start(clock: Arc<dyn Clock>) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            clock,
        });
        let its = shared.clone();
        let thread = std::thread::Builder::new()
            .name("demo-timer".into())
            .spawn(move || run(&its))
            .expect("the demo's timer thread");
        Self {
            shared,
            thread: Some(thread),
        }
    }

    /// Sleeps for `d` (tokio's own sleep, were the timer's thread gone).
    pub async fn sleep(&self, d: Duration) {
        if d.is_zero() {
            return;
        }
        let at = self.shared.clock.now() + d;
        let (wake, woken) = oneshot::channel();
        // (The guard is gone before any await: the future stays `Send`.)
        let first = self.shared.queue.lock().ok().map(|mut q| {
            q.queued += 1;
            let seq = q.queued;
            q.due.push(Due { at, seq, wake });
            q.due.peek().is_some_and(|d| d.seq == seq)
        });
        if let Some(thread) = self.thread.as_ref().filter(|_| first == Some(true)) {
            thread.thread().unpark();
        }
        // A poisoned queue dropped the sender: tokio's sleep then.
        if woken.await.is_err() {
            let left = at.saturating_sub(self.shared.clock.now());
            tokio::time::sleep(left).await;
        }
    }
}

impl Drop for PreciseTimer {
    fn drop(&mut self) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.closed = true;
        }
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// The timer's thread: wakes what is due, then parks until the next deadline.
fn run(shared: &Shared) {
    // How late a park wakes past the time asked (a running mean, capped at MAX_EARLY).
    let mut late = Duration::ZERO;
    loop {
        let now = shared.clock.now();
        let next = {
            let Ok(mut q) = shared.queue.lock() else {
                return;
            };
            if q.closed {
                return;
            }
            while q.due.peek().is_some_and(|d| d.at <= now + late) {
                if let Some(due) = q.due.pop() {
                    // A sleeper that went away (its request was dropped) is not waiting.
                    let _ = due.wake.send(());
                }
            }
            q.due.peek().map(|d| d.at)
        };
        let Some(at) = next else {
            std::thread::park();
            continue;
        };
        let wake_at = at.saturating_sub(late).max(now);
        std::thread::park_timeout(wake_at - now);
        let woke = shared.clock.now();
        // Woken for a new earliest deadline, or spuriously: not a measure of lateness.
        if woke >= wake_at {
            let this = (woke - wake_at).min(MAX_EARLY);
            late = (late * 7 + this) / 8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brownout::clock::SystemClock;

    #[test]
    fn deadlines_wake_in_their_order_and_never_more_than_the_margin_early() {
        let clock = Arc::new(SystemClock::new());
        let timer = Arc::new(PreciseTimer::start(clock.clone()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let start = clock.now();
        let woke = rt.block_on(async {
            let order = Arc::new(Mutex::new(Vec::new()));
            let tasks: Vec<_> = [9u64, 3, 6, 1, 0]
                .into_iter()
                .map(|ms| {
                    let (timer, order, clock) = (timer.clone(), order.clone(), clock.clone());
                    tokio::spawn(async move {
                        timer.sleep(Duration::from_millis(ms)).await;
                        let at = clock.now() - start;
                        order.lock().unwrap().push((ms, at));
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            Arc::try_unwrap(order).unwrap().into_inner().unwrap()
        });
        let asked: Vec<u64> = woke.iter().map(|(ms, _)| *ms).collect();
        assert_eq!(asked, [0, 1, 3, 6, 9]);
        for (ms, at) in woke {
            assert!(
                at + MAX_EARLY >= Duration::from_millis(ms),
                "{ms} ms woke at {at:?}"
            );
        }
    }

    #[test]
    fn the_thread_ends_when_the_timer_is_dropped() {
        let timer = PreciseTimer::start(Arc::new(SystemClock::new()));
        let weak = Arc::downgrade(&timer.shared);
        // Drop joins the thread, which held the other reference.
        drop(timer);
        assert!(weak.upgrade().is_none());
    }
}
