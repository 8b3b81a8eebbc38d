//! The limiters' arithmetic, pure and clock-free (times are plain microseconds): the GCRA token
//! bucket, the fixed and sliding window counters, the sliding log, the adaptive limit and the app's service
//! time per tier. The stores apply it atomically to their
//! state; the limiters decide with it.

pub(crate) mod adaptive;
pub(crate) mod capacity;
pub(crate) mod critical;
pub mod gcra;
pub(crate) mod latency_window;
pub(crate) mod log;
pub(crate) mod service;
pub mod window;
