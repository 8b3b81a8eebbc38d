//! The `brownout` binary's library: the demo app that `cargo run --release` serves with
//! brownout embedded, and the configuration file as the binary reads it (brownout's sections
//! and `demo:`). The commands themselves (admin client, `simulate`, `bench`) are in the
//! binary. Not published: it is the project's workshop, not part of brownout's API.

pub mod config;
pub mod demo;
