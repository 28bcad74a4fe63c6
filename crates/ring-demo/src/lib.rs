//! What the examples (examples/*.rs, through ring-rt's dev-dependency) and ring-bench's tokio
//! comparison programs share, so each piece is written once: the command-line flag reader
//! and the hyper demo service. It depends on neither ring-rt nor tokio.

pub mod flags;
pub mod service;
