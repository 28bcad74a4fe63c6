//! Reading and writing the flat JSON objects the bench tools exchange (`echo-load --json`,
//! the echo example's `metrics {...}` line): numbers and strings, no nesting, so no parser
//! dependency.

use std::fmt::Write;

/// The number stored under `key` in a flat JSON object, if any.
pub fn number(obj: &str, key: &str) -> Option<f64> {
    let rest = value_start(obj, key)?;
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E')))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The string stored under `key` (without escapes: the tools never write any).
pub fn string<'a>(obj: &'a str, key: &str) -> Option<&'a str> {
    let rest = value_start(obj, key)?.strip_prefix('"')?;
    rest.split_once('"').map(|(s, _)| s)
}

fn value_start<'a>(obj: &'a str, key: &str) -> Option<&'a str> {
    let quoted = format!("\"{key}\"");
    let at = obj.find(&quoted)? + quoted.len();
    let rest = obj[at..].trim_start().strip_prefix(':')?;
    Some(rest.trim_start())
}

/// Builds one flat JSON object field by field.
#[derive(Default)]
pub struct Object {
    text: String,
}

impl Object {
    /// Adds a string field (`value` must not need escaping).
    pub fn str(mut self, key: &str, value: &str) -> Object {
        self.sep();
        let _ = write!(self.text, "\"{key}\":\"{value}\"");
        self
    }

    /// Adds a number field; non-finite numbers become `null`.
    pub fn num(mut self, key: &str, value: f64) -> Object {
        self.sep();
        if value.is_finite() {
            let _ = write!(self.text, "\"{key}\":{}", round(value));
        } else {
            let _ = write!(self.text, "\"{key}\":null");
        }
        self
    }

    /// Adds a number field, or `null` when absent.
    pub fn opt(self, key: &str, value: Option<f64>) -> Object {
        self.num(key, value.unwrap_or(f64::NAN))
    }

    /// The finished object.
    pub fn finish(self) -> String {
        format!("{{{}}}", self.text)
    }

    fn sep(&mut self) {
        if !self.text.is_empty() {
            self.text.push(',');
        }
    }
}

/// Six significant digits are plenty for measurements and keep the files readable.
fn round(value: f64) -> f64 {
    if value == 0.0 || value.fract() == 0.0 {
        return value;
    }
    let scale = 10f64.powi(5 - value.abs().log10().floor() as i32);
    (value * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_numbers_and_strings_of_a_flat_object() {
        let line = r#"{"backend":"uring", "enters": 42,"rate":1.5e3,"neg":-2}"#;
        assert_eq!(string(line, "backend"), Some("uring"));
        assert_eq!(number(line, "enters"), Some(42.0));
        assert_eq!(number(line, "rate"), Some(1500.0));
        assert_eq!(number(line, "neg"), Some(-2.0));
        assert_eq!(number(line, "missing"), None);
        assert_eq!(number(line, "backend"), None);
    }

    #[test]
    fn writes_what_it_reads() {
        let obj = Object::default()
            .str("server", "tokio-ct")
            .num("rps", 12345.678)
            .opt("enters", None)
            .finish();
        assert_eq!(obj, r#"{"server":"tokio-ct","rps":12345.7,"enters":null}"#);
        assert_eq!(number(&obj, "rps"), Some(12345.7));
    }
}
