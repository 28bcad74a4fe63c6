//! The command-line reader of the examples and the bench programs: `--flag value` pairs,
//! each value parsed with its type's `FromStr`, errors worded one way for all of them.

use std::fmt::Display;
use std::str::FromStr;

/// Reads `--flag value` pairs from an argument list; the caller matches on the flag's name
/// and asks for its value as the type it wants.
///
/// # Examples
///
/// ```
/// use ring_demo::flags::Flags;
///
/// let args = ["--threads", "4", "--addr", "127.0.0.1:80"].map(String::from);
/// let mut flags = Flags::new(args.into_iter());
/// let (mut threads, mut addr) = (1usize, None::<std::net::SocketAddr>);
/// while let Some(flag) = flags.next_flag()? {
///     match flag.as_str() {
///         "--threads" => threads = flags.value()?,
///         "--addr" => addr = Some(flags.value()?),
///         _ => return Err(flags.unknown()),
///     }
/// }
/// assert_eq!((threads, addr.unwrap().port()), (4, 80));
/// # Ok::<(), String>(())
/// ```
pub struct Flags<I> {
    args: I,
    /// The flag last read by `next_flag`, and its value (still text).
    flag: String,
    value: String,
}

impl Flags<std::iter::Skip<std::env::Args>> {
    /// This process's arguments, without the program's name.
    pub fn from_env() -> Self {
        Flags::new(std::env::args().skip(1))
    }
}

impl<I: Iterator<Item = String>> Flags<I> {
    /// Reads `args` (the program's name already skipped).
    pub fn new(args: I) -> Self {
        Flags {
            args,
            flag: String::new(),
            value: String::new(),
        }
    }

    /// The next flag's name, its value read too (`None` at the end). A flag with nothing
    /// after it is an error: `--flag needs a value`.
    pub fn next_flag(&mut self) -> Result<Option<String>, String> {
        let Some(flag) = self.args.next() else {
            return Ok(None);
        };
        self.value = self
            .args
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?;
        self.flag.clone_from(&flag);
        Ok(Some(flag))
    }

    /// The current flag's value as a `T`; the error names flag, value and what was wrong:
    /// `--threads x: invalid digit found in string`.
    pub fn value<T>(&self) -> Result<T, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        self.value
            .parse()
            .map_err(|e| format!("{} {}: {e}", self.flag, self.value))
    }

    /// The error for a flag the program does not know: `unknown flag --flag`.
    pub fn unknown(&self) -> String {
        format!("unknown flag {}", self.flag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags<std::vec::IntoIter<String>> {
        Flags::new(
            args.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .into_iter(),
        )
    }

    #[test]
    fn values_parse_as_the_type_asked_for() {
        let mut f = flags(&["--n", "7", "--name", "x y"]);
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("--n"));
        assert_eq!(f.value::<u64>(), Ok(7));
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("--name"));
        assert_eq!(f.value::<String>().as_deref(), Ok("x y"));
        assert_eq!(f.next_flag(), Ok(None));
    }

    #[test]
    fn flag_without_value_is_an_error() {
        let mut f = flags(&["--n"]);
        assert_eq!(f.next_flag(), Err("--n needs a value".to_string()));
    }

    #[test]
    fn bad_value_error_names_flag_value_and_cause() {
        let mut f = flags(&["--threads", "x"]);
        f.next_flag().unwrap();
        let err = f.value::<usize>().unwrap_err();
        assert_eq!(err, "--threads x: invalid digit found in string");
    }

    #[test]
    fn unknown_flag_error_names_it() {
        let mut f = flags(&["--what", "1"]);
        f.next_flag().unwrap();
        assert_eq!(f.unknown(), "unknown flag --what");
    }
}
