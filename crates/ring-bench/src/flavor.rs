//! Which tokio scheduler the comparison servers (tokio-echo, tokio-hyper) run on: their
//! `--flavor current_thread|multi_thread`.

use std::fmt;
use std::io;
use std::str::FromStr;

use tokio::runtime::{Builder, Runtime};

/// tokio's two schedulers, named as `#[tokio::main(flavor = ...)]` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// Everything on the calling thread.
    CurrentThread,
    /// A work-stealing pool, one worker per CPU.
    MultiThread,
}

impl Flavor {
    /// `current_thread` or `multi_thread`.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::CurrentThread => "current_thread",
            Flavor::MultiThread => "multi_thread",
        }
    }

    /// A runtime of this flavor with I/O and timers enabled.
    pub fn runtime(self) -> io::Result<Runtime> {
        let mut builder = match self {
            Flavor::CurrentThread => Builder::new_current_thread(),
            Flavor::MultiThread => Builder::new_multi_thread(),
        };
        builder.enable_all().build()
    }
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Flavor {
    type Err = &'static str;

    fn from_str(s: &str) -> Result<Flavor, &'static str> {
        match s {
            "current_thread" => Ok(Flavor::CurrentThread),
            "multi_thread" => Ok(Flavor::MultiThread),
            _ => Err("current_thread or multi_thread"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavor_names_round_trip_and_others_are_rejected() {
        for flavor in [Flavor::CurrentThread, Flavor::MultiThread] {
            assert_eq!(flavor.name().parse(), Ok(flavor));
        }
        assert_eq!(
            "multi".parse::<Flavor>(),
            Err("current_thread or multi_thread")
        );
    }
}
