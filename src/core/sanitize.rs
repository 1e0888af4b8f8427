//! Escaping of container-controlled strings before they reach a terminal, a
//! log file or syslog: an image must not be able to forge log lines (newline
//! injection), drive a terminal (escape sequences) or make a line read
//! other than it is (bidi overrides) through its env values, paths or names.
//!
//! One character set and one spelling for every form below:
//! - C0 controls and DEL become `\xNN`;
//! - C1 controls, the line and paragraph separators U+2028/U+2029, and the
//!   bidirectional marks, embeddings, overrides and isolates (U+200E,
//!   U+200F, U+202A-U+202E, U+2066-U+2069: Unicode UAX #9; the "Trojan
//!   Source" class, CVE-2021-42574) become `\u{NNNN}`.
//!
//! The forms differ only in what they do besides: [`esc`] and
//! [`esc_bounded`] quote a container string (a backslash doubled, the
//! length cut), [`clean`] is the last pass over a whole finding field
//! (idempotent), [`one_line`] joins our own multi-line text for syslog.

/// Longest container string quoted in one message.
pub const MAX_QUOTE: usize = 240;

/// How a character must be written, if it cannot be written as itself.
enum Escaped {
    /// `\xNN`: C0 controls and DEL.
    Byte(u32),
    /// `\u{NNNN}`: C1 controls, separators and bidi controls.
    Unicode(u32),
}

fn escaped(c: char) -> Option<Escaped> {
    match c {
        '\u{0}'..='\u{1f}' | '\u{7f}' => Some(Escaped::Byte(c as u32)),
        '\u{80}'..='\u{9f}'
        | '\u{2028}'
        | '\u{2029}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}' => Some(Escaped::Unicode(c as u32)),
        _ => None,
    }
}

/// Appends `c`, escaped when it must be; the number of characters added.
fn push(out: &mut String, c: char) -> usize {
    use std::fmt::Write;
    match escaped(c) {
        Some(Escaped::Byte(n)) => {
            let _ = write!(out, "\\x{n:02x}");
            4
        }
        Some(Escaped::Unicode(n)) => {
            let before = out.len();
            let _ = write!(out, "\\u{{{n:04x}}}");
            out.len() - before
        }
        None => {
            out.push(c);
            1
        }
    }
}

/// Quotes a container string: every character of the set above escaped,
/// a backslash doubled (so an escape in the input cannot pass for ours),
/// the result cut to [`MAX_QUOTE`] characters of input, saying how much
/// was left out.
pub fn esc(s: &str) -> String {
    esc_bounded(s, MAX_QUOTE)
}

/// [`esc`] with its own limit: at most `max_chars` characters of `s`, then
/// `…(+N bytes)` when more was left out.
pub fn esc_bounded(s: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max_chars + 16));
    for (count, (i, c)) in s.char_indices().enumerate() {
        if count >= max_chars {
            out.push_str(&format!("…(+{} bytes)", s.len() - i));
            return out;
        }
        match c {
            '\\' => out.push_str("\\\\"),
            c => {
                push(&mut out, c);
            }
        }
    }
    out
}

/// Longest text of one finding field (message, fix, detail line). Quotes
/// are bounded by [`esc`] already; this bounds what a caller forgot to quote.
const MAX_FIELD: usize = 16 * 1024;

/// The one pass every finding field goes through ([`crate::core::decision::Finding`]'s
/// constructors): characters of the set above escaped as in [`esc`], and
/// the text cut to `MAX_FIELD` characters. Backslashes are left alone,
/// so text already passed through [`esc`] comes out unchanged: applying it
/// twice changes nothing.
pub fn clean(s: String) -> String {
    let long = s.len() > MAX_FIELD && s.chars().count() > MAX_FIELD;
    if !long && !s.chars().any(|c| escaped(c).is_some()) {
        return s;
    }
    // Output characters kept, leaving room for the "…(+N bytes)" tail, so
    // the result is within MAX_FIELD characters and a second pass leaves
    // it as it is.
    let keep = MAX_FIELD - 32;
    let mut out = String::with_capacity(s.len().min(MAX_FIELD + 8));
    let mut kept = 0usize;
    let mut piece = String::new();
    for (i, c) in s.char_indices() {
        piece.clear();
        let n = push(&mut piece, c);
        if kept + n > keep {
            out.push_str(&format!("…(+{} bytes)", s.len() - i));
            break;
        }
        kept += n;
        out.push_str(&piece);
    }
    out
}

/// Makes any text one line (for syslog and `--log` JSON): our own newlines
/// become ` | `, a carriage return is dropped, every other character of the
/// set above is escaped as in [`esc`].
pub fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str(" | "),
            '\r' => {}
            c => {
                push(&mut out, c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_controls() {
        assert_eq!(esc("a\nb\x1b[31m"), "a\\x0ab\\x1b[31m");
        assert_eq!(esc("tab\there"), "tab\\x09here");
        assert_eq!(esc("\u{2028}"), "\\u{2028}");
        assert_eq!(esc("back\\slash"), "back\\\\slash");
        assert_eq!(esc("plain cuda>=12.4"), "plain cuda>=12.4");
    }

    #[test]
    fn bounds_length() {
        let long = "x".repeat(1_000_000);
        let e = esc(&long);
        assert!(e.len() < 300, "{}", e.len());
        assert!(e.ends_with("bytes)"));
    }

    #[test]
    fn clean_escapes_controls_once() {
        assert_eq!(
            clean("a\nb\x1b[31m\u{85}".into()),
            "a\\x0ab\\x1b[31m\\u{0085}"
        );
        let once = clean(format!("{} and \x07", esc("q\\\x1b")));
        assert_eq!(clean(once.clone()), once);
        assert_eq!(clean("plain \\ text".into()), "plain \\ text");
        for big in [
            "é".repeat(1_000_000),
            "\x1b".repeat(1_000_000),
            "a\u{85}".repeat(100_000),
        ] {
            let long = clean(big);
            assert!(
                long.chars().count() <= MAX_FIELD,
                "{}",
                long.chars().count()
            );
            assert_eq!(clean(long.clone()), long);
        }
    }

    #[test]
    fn one_line_has_no_newlines() {
        let s = one_line("line one\nline two\r\n\x07bell");
        assert!(!s.contains('\n') && !s.contains('\r') && !s.contains('\x07'));
        assert!(s.contains("line one | line two"));
    }

    #[test]
    fn bidi_and_separators_are_escaped_by_every_form() {
        // A path that reads `txt.exe` backwards: U+202E is shown, not obeyed.
        let trojan = "lib\u{202e}exe.txt\u{2066}x\u{2069}\u{200f}";
        let want = "lib\\u{202e}exe.txt\\u{2066}x\\u{2069}\\u{200f}";
        assert_eq!(esc(trojan), want);
        assert_eq!(clean(trojan.to_string()), want);
        assert_eq!(one_line(trojan), want);
        for c in [
            '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{2067}', '\u{2068}', '\u{200e}',
        ] {
            let e = esc(&c.to_string());
            assert_eq!(e, format!("\\u{{{:04x}}}", c as u32));
            assert_eq!(one_line(&c.to_string()), e);
        }
        // The separators are spelled as themselves, never cut to a byte.
        assert_eq!(one_line("a\u{2028}b\u{2029}"), "a\\u{2028}b\\u{2029}");
        assert_eq!(one_line("\u{85}\t"), "\\u{0085}\\x09");
        // Ordinary text, including other non-ASCII, is left alone.
        assert_eq!(esc("日本語 ü ‐ –"), "日本語 ü ‐ –");
    }

    #[test]
    fn bounded_quotes_cut_and_escape() {
        assert_eq!(esc_bounded("a\tb\x1b[31m", 100), "a\\x09b\\x1b[31m");
        assert_eq!(esc_bounded("x\\y", 100), "x\\\\y");
        assert_eq!(esc_bounded("\u{85}", 100), "\\u{0085}");
        let long = "é".repeat(500);
        let e = esc_bounded(&long, 10);
        assert!(e.starts_with(&"é".repeat(10)), "{e}");
        assert_eq!(e.chars().filter(|c| *c == 'é').count(), 10, "{e}");
        assert!(e.ends_with("…(+980 bytes)"), "{e}");
    }
}
