//! Escaping of container-controlled strings before they reach a terminal, a
//! log file or syslog: an image must not be able to forge log lines (newline
//! injection) or drive a terminal (escape sequences) through its env values.

/// Longest container string quoted in one message.
pub const MAX_QUOTE: usize = 240;

/// Escapes control characters (C0, DEL, C1, Unicode line/paragraph
/// separators) as `\xNN` / `\u{NNNN}` and cuts the result to `MAX_QUOTE`
/// characters, saying how much was left out.
pub fn esc(s: &str) -> String {
    esc_bounded(s, MAX_QUOTE)
}

pub fn esc_bounded(s: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max_chars + 16));
    for (count, (i, c)) in s.char_indices().enumerate() {
        if count >= max_chars {
            out.push_str(&format!("…(+{} bytes)", s.len() - i));
            return out;
        }
        match c {
            '\u{0}'..='\u{1f}' | '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            '\u{80}'..='\u{9f}' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{{{:04x}}}", c as u32))
            }
            '\\' => out.push_str("\\\\"),
            _ => out.push(c),
        }
    }
    out
}

/// Longest text of one finding field (message, fix, detail line). Quotes
/// are bounded by [`esc`] already; this bounds what a caller forgot to quote.
pub const MAX_FIELD: usize = 16 * 1024;

fn is_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}' | '\u{80}'..='\u{9f}' | '\u{2028}' | '\u{2029}')
}

/// The one pass every finding field goes through ([`crate::core::decision::Finding`]'s
/// constructors): control characters become `\xNN` / `\u{NNNN}` as in
/// [`esc`], and the text is cut to [`MAX_FIELD`] characters. Backslashes
/// are left alone, so text already passed through [`esc`] comes out
/// unchanged: applying it twice changes nothing.
pub fn clean(s: String) -> String {
    let long = s.len() > MAX_FIELD && s.chars().count() > MAX_FIELD;
    if !long && !s.chars().any(is_control) {
        return s;
    }
    // Output characters kept, leaving room for the "…(+N bytes)" tail, so
    // the result is within MAX_FIELD characters and a second pass leaves
    // it as it is.
    let keep = MAX_FIELD - 32;
    let mut out = String::with_capacity(s.len().min(MAX_FIELD + 8));
    let mut kept = 0usize;
    for (i, c) in s.char_indices() {
        let piece = match c {
            '\u{0}'..='\u{1f}' | '\u{7f}' => format!("\\x{:02x}", c as u32),
            c if is_control(c) => format!("\\u{{{:04x}}}", c as u32),
            c => c.to_string(),
        };
        let n = piece.chars().count();
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
/// become ` | `, every other control character is escaped.
pub fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str(" | "),
            '\r' => {}
            '\u{0}'..='\u{1f}' | '\u{7f}' | '\u{80}'..='\u{9f}' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\x{:02x}", c as u32 & 0xff))
            }
            _ => out.push(c),
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
}
