//! The one format of gpu-guard's log records (syslog, the runtime's
//! `--log`, the hooks' stderr without syslog): `key=value` pairs on one
//! line, in the logfmt convention that Loki's `logfmt` parser, Vector's
//! `parse_logfmt` and Go's go-logfmt read. A value is written bare when it
//! is not empty and has no space, `"`, `=` or `\`; else in double quotes,
//! with `"` and `\` escaped by a backslash. Every value first goes through
//! core::sanitize: control, separator and bidi characters never reach a
//! log, and a container's strings are cut to a bound.
//!
//! [`Line`] is for any record, not only decisions: a config error, a
//! metrics failure, a decision all read the same way.

use crate::core::sanitize::{esc_bounded, one_line};
use std::fmt::Write as _;

/// Longest container value kept in a record (a Kubernetes name is at most
/// 253 characters; an image reference with its digest a few hundred).
pub const MAX_VALUE: usize = 512;

/// One record being written.
#[derive(Debug, Default, Clone)]
pub struct Line {
    out: String,
}

impl Line {
    pub fn new() -> Line {
        Line::default()
    }

    /// A value gpu-guard chose (a verdict, a mode, a count, its own text):
    /// written as it is, quoted where it must be.
    pub fn field(mut self, key: &str, value: impl std::fmt::Display) -> Line {
        let v = one_line(&value.to_string());
        self.push(key, &v);
        self
    }

    /// A value a container, an image or a user chose (an id, a pod name,
    /// an image reference): escaped as core::sanitize `esc` escapes it and
    /// cut to [`MAX_VALUE`] characters, then quoted where it must be.
    pub fn untrusted(mut self, key: &str, value: &str) -> Line {
        let v = esc_bounded(value, MAX_VALUE);
        self.push(key, &v);
        self
    }

    /// [`Line::untrusted`] when there is a value.
    pub fn untrusted_opt(self, key: &str, value: Option<&str>) -> Line {
        match value {
            Some(v) => self.untrusted(key, v),
            None => self,
        }
    }

    fn push(&mut self, key: &str, value: &str) {
        if !self.out.is_empty() {
            self.out.push(' ');
        }
        self.out.push_str(key);
        self.out.push('=');
        write_value(&mut self.out, value);
    }

    /// The record, one line.
    pub fn finish(self) -> String {
        self.out
    }
}

/// Whether `v` can be written without quotes.
fn bare(v: &str) -> bool {
    !v.is_empty() && !v.contains([' ', '"', '=', '\\'])
}

fn write_value(out: &mut String, v: &str) {
    if bare(v) {
        out.push_str(v);
        return;
    }
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => {
                let _ = out.write_char(c);
            }
        }
    }
    out.push('"');
}

/// Reads a record back into its pairs (tests, and tools that check what
/// was logged): the inverse of [`Line`]. None for text that is not one.
pub fn parse(line: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut it = line.chars().peekable();
    loop {
        while it.peek() == Some(&' ') {
            it.next();
        }
        if it.peek().is_none() {
            return Some(out);
        }
        let mut key = String::new();
        while let Some(&c) = it.peek() {
            if c == '=' || c == ' ' {
                break;
            }
            key.push(c);
            it.next();
        }
        if it.next() != Some('=') || key.is_empty() {
            return None;
        }
        let mut value = String::new();
        if it.peek() == Some(&'"') {
            it.next();
            loop {
                match it.next()? {
                    '"' => break,
                    '\\' => value.push(it.next()?),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = it.peek() {
                if c == ' ' {
                    break;
                }
                value.push(c);
                it.next();
            }
        }
        out.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_quoted_only_when_they_must_be_and_read_back() {
        let l = Line::new()
            .field("verdict", "refuse")
            .untrusted("pod", "train-0")
            .untrusted("image", "reg:5000/a b\"c\\d")
            .field("msg", "x = y")
            .field("empty", "")
            .finish();
        assert_eq!(
            l,
            r#"verdict=refuse pod=train-0 image="reg:5000/a b\"c\\\\d" msg="x = y" empty="""#
        );
        let back = parse(&l).unwrap();
        assert_eq!(back[2].1, "reg:5000/a b\"c\\\\d");
        assert_eq!(back[4], ("empty".into(), String::new()));
    }

    #[test]
    fn a_container_cannot_forge_a_field_or_a_line() {
        let evil = "x\" verdict=allow\nverdict=allow \u{202e}";
        let l = Line::new()
            .untrusted("pod", evil)
            .field("verdict", "refuse")
            .finish();
        assert!(!l.contains('\n') && !l.contains('\u{202e}'), "{l}");
        let back = parse(&l).unwrap();
        assert_eq!(back.len(), 2, "{l}");
        assert_eq!(back[1], ("verdict".into(), "refuse".into()));
        let long = "p".repeat(10_000);
        let l = Line::new().untrusted("pod", &long).finish();
        assert!(l.len() < MAX_VALUE + 64, "{}", l.len());
    }
}
