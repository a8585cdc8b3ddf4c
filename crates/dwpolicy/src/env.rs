//! Strict reading of integer limits from environment variables.
//!
//! The reference server reads limits with a PHP `(int)` cast, so a typo such as
//! `DW_V2_LIMIT_PENDING_ACTIVITIES=abc` silently becomes `0`, and `0` turns the
//! limit off: a misconfiguration removes the very guard it meant to tune.
//! Every guard in this crate reads its variables through this module instead,
//! which refuses anything but a non-negative integer and reports every bad
//! variable at once, so an operator fixes a deployment in one pass.

use std::fmt;

/// One environment variable whose value is not a non-negative integer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?} is not valid: {reason}")]
pub struct InvalidEnvValue {
    /// The variable's name, e.g. `DW_V2_LIMIT_PENDING_ACTIVITIES`.
    pub variable: String,
    /// The value as found (lossily decoded when it was not UTF-8).
    pub value: String,
    /// Why the value was refused.
    pub reason: InvalidReason,
}

/// Why an environment value was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidReason {
    /// Empty or only whitespace: an unset variable is the way to ask for the default.
    Empty,
    /// Contains something other than ASCII digits (a sign, a decimal point, letters).
    NotANonNegativeInteger,
    /// All digits, but larger than the limit type can hold.
    OutOfRange,
}

impl fmt::Display for InvalidReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InvalidReason::Empty => "it is empty; unset it to use the default",
            InvalidReason::NotANonNegativeInteger => "expected a non-negative integer (0 disables)",
            InvalidReason::OutOfRange => "the number is too large",
        })
    }
}

/// Every invalid variable found while reading one configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid limit configuration: {}", render(.errors))]
pub struct EnvConfigError {
    /// The invalid variables, in the order they were read.
    pub errors: Vec<InvalidEnvValue>,
}

fn render(errors: &[InvalidEnvValue]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Parses `raw` as a non-negative integer for `variable`.
///
/// Surrounding ASCII whitespace is ignored because `.env` files and YAML
/// often leave it; anything else that is not a digit is refused.
pub fn parse_non_negative(variable: &str, raw: &str) -> Result<u64, InvalidEnvValue> {
    let invalid = |reason| InvalidEnvValue {
        variable: variable.to_owned(),
        value: raw.to_owned(),
        reason,
    };
    let digits = raw.trim_matches(|c: char| c.is_ascii_whitespace());
    if digits.is_empty() {
        return Err(invalid(InvalidReason::Empty));
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(InvalidReason::NotANonNegativeInteger));
    }
    digits
        .parse::<u64>()
        .map_err(|_| invalid(InvalidReason::OutOfRange))
}

/// Reads several variables through one lookup, collecting every error.
///
/// The lookup is a parameter so tests (and embedders with their own config
/// source) never have to mutate the process environment.
pub struct EnvReader<F> {
    lookup: F,
    errors: Vec<InvalidEnvValue>,
}

impl<F: FnMut(&str) -> Option<String>> EnvReader<F> {
    /// A reader over `lookup`, which returns a variable's value or `None` when unset.
    pub fn new(lookup: F) -> Self {
        EnvReader {
            lookup,
            errors: Vec::new(),
        }
    }

    /// The value of `variable`, or `default` when it is unset or invalid.
    ///
    /// An invalid value is remembered and reported by [`EnvReader::finish`];
    /// the default returned meanwhile only lets reading continue.
    pub fn read(&mut self, variable: &str, default: u64) -> u64 {
        match (self.lookup)(variable) {
            None => default,
            Some(raw) => match parse_non_negative(variable, &raw) {
                Ok(value) => value,
                Err(error) => {
                    self.errors.push(error);
                    default
                }
            },
        }
    }

    /// Ends reading: `Err` with every invalid variable if there was any.
    pub fn finish(self) -> Result<(), EnvConfigError> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(EnvConfigError {
                errors: self.errors,
            })
        }
    }
}

/// Looks a variable up in the process environment.
///
/// A value that is not valid UTF-8 is decoded lossily rather than treated as
/// unset, so it is reported as invalid instead of silently falling back.
pub fn process_lookup(variable: &str) -> Option<String> {
    std::env::var_os(variable).map(|v| v.to_string_lossy().into_owned())
}

/// A lookup over fixed `(variable, value)` pairs: a configuration given
/// explicitly (a config file, a test) read by the same strict parser as the
/// process environment.
pub fn pairs_lookup(pairs: &[(&str, &str)]) -> impl FnMut(&str) -> Option<String> {
    let map: std::collections::HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_digits_and_surrounding_whitespace() {
        assert_eq!(parse_non_negative("X", "0"), Ok(0));
        assert_eq!(parse_non_negative("X", " 2000\n"), Ok(2000));
        assert_eq!(parse_non_negative("X", "007"), Ok(7));
    }

    #[test]
    fn refuses_what_php_would_cast_to_zero() {
        for (raw, reason) in [
            ("abc", InvalidReason::NotANonNegativeInteger),
            ("-1", InvalidReason::NotANonNegativeInteger),
            ("+5", InvalidReason::NotANonNegativeInteger),
            ("1.5", InvalidReason::NotANonNegativeInteger),
            ("1_000", InvalidReason::NotANonNegativeInteger),
            ("12abc", InvalidReason::NotANonNegativeInteger),
            ("", InvalidReason::Empty),
            ("  ", InvalidReason::Empty),
            ("18446744073709551616", InvalidReason::OutOfRange),
        ] {
            let error = parse_non_negative("DW_X", raw).unwrap_err();
            assert_eq!(error.reason, reason, "{raw:?}");
            assert_eq!(error.variable, "DW_X");
            assert_eq!(error.value, raw);
        }
    }

    #[test]
    fn reader_collects_every_bad_variable() {
        let mut reader = EnvReader::new(|name: &str| match name {
            "A" => Some("abc".to_string()),
            "B" => Some("5".to_string()),
            "C" => Some("-3".to_string()),
            _ => None,
        });
        assert_eq!(reader.read("A", 1), 1);
        assert_eq!(reader.read("B", 1), 5);
        assert_eq!(reader.read("C", 1), 1);
        assert_eq!(reader.read("D", 9), 9);
        let error = reader.finish().unwrap_err();
        let names: Vec<_> = error.errors.iter().map(|e| e.variable.as_str()).collect();
        assert_eq!(names, ["A", "C"]);
        let text = error.to_string();
        assert!(text.contains("A=\"abc\""), "{text}");
        assert!(text.contains("C=\"-3\""), "{text}");
    }
}
