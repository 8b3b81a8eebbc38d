//! The limiters' arithmetic, pure and clock-free (times are plain microseconds): the GCRA token
//! bucket and the fixed and sliding window counters. The stores apply it atomically to their
//! state; the limiters decide with it.

pub(crate) mod adaptive;
pub(crate) mod critical;
pub mod gcra;
pub mod window;
