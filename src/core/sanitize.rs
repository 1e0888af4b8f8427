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
    fn one_line_has_no_newlines() {
        let s = one_line("line one\nline two\r\n\x07bell");
        assert!(!s.contains('\n') && !s.contains('\r') && !s.contains('\x07'));
        assert!(s.contains("line one | line two"));
    }
}
