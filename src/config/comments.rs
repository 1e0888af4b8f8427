//! Whole-line comments emptied before toml reads a config file.
//!
//! toml lexes and validates a comment byte by byte, and the shipped
//! config.toml is mostly comments: parsing them was most of what a
//! non-GPU container's start cost (integration/bench-start.sh). Emptying
//! each comment line, its line ending kept, changes neither the values nor
//! any line number toml reports.

use std::borrow::Cow;

/// `text` with every line whose first non-blank character is `#` emptied,
/// or `text` unchanged where that could change what it means or whether it
/// is valid:
/// - a file with a multi-line string (`"""` or `'''` outside a comment)
///   may have a line that starts inside the string (TOML 1.1, "String");
///   no other string spans lines;
/// - a comment holding a control character other than tab is invalid TOML
///   ("Comment"), which toml must still see to reject.
pub fn without_comment_lines(text: &str) -> Cow<'_, str> {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() / 4);
    let mut start = 0;
    while start < b.len() {
        let indent = b[start..].iter().take_while(|&&c| c == b' ' || c == b'\t');
        let body = start + indent.count();
        let end = if b.get(body) == Some(&b'#') {
            let Some(ending) = comment_end(b, body) else {
                return Cow::Borrowed(text);
            };
            let end = line_end(b, ending);
            out.push_str(&text[ending..end]);
            end
        } else {
            let end = line_end(b, start);
            if opens_multiline_string(&b[start..end]) {
                // Nothing before this line was inside a string.
                return Cow::Borrowed(text);
            }
            out.push_str(&text[start..end]);
            end
        };
        start = end;
    }
    Cow::Owned(out)
}

/// Just past the `\n` ending the line that `from` is on (or the end).
fn line_end(b: &[u8], from: usize) -> usize {
    b[from..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |i| from + i + 1)
}

/// Where the comment from `i` on ends: its line's `\r\n` or `\n`, or the
/// end of the text; None when it holds a control character other than tab.
/// Comments are most of the shipped file, so they are skipped eight bytes
/// at a time while no byte is below 0x20 or 0x7f (SWAR; Bit Twiddling
/// Hacks, "Determine if a word has a byte less than n").
fn comment_end(b: &[u8], mut i: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_control = |x: u64| {
        let del = x ^ (0x7f * ONES);
        (x.wrapping_sub(0x20 * ONES) & !x | del.wrapping_sub(ONES) & !del) & HIGH != 0
    };
    loop {
        while let Some(word) = b.get(i..i + 8) {
            if has_control(u64::from_le_bytes(word.try_into().ok()?)) {
                break;
            }
            i += 8;
        }
        match b.get(i) {
            None | Some(b'\n') => return Some(i),
            Some(b'\r') if b.get(i + 1) == Some(&b'\n') => return Some(i),
            Some(&c) if c == b'\t' || (0x20..0x7f).contains(&c) || c >= 0x80 => i += 1,
            Some(_) => return None,
        }
    }
}

/// Whether `"""` or `'''` is on this (non-comment) line.
fn opens_multiline_string(line: &[u8]) -> bool {
    line.windows(3)
        .any(|w| w[0] == w[1] && w[1] == w[2] && (w[0] == b'"' || w[0] == b'\''))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_lines_are_emptied_and_lines_kept() {
        let text = "# head\nmode = \"warn\" # kept\n  \t# indented\r\n[log]\n#last";
        assert_eq!(
            without_comment_lines(text),
            "\nmode = \"warn\" # kept\n\r\n[log]\n"
        );
        assert_eq!(
            without_comment_lines("a = [\n  # c\n  1,\n]\n"),
            "a = [\n\n  1,\n]\n"
        );
        // Past eight bytes (the word-at-a-time skip), with a tab, UTF-8 and CRLF.
        let long = "# a comment longer than a word,\twith ünïcödé — and more\r\nk = 1\n";
        assert_eq!(without_comment_lines(long), "\r\nk = 1\n");
    }

    #[test]
    fn left_alone_where_emptying_could_change_the_meaning() {
        for text in [
            "a = \"\"\"\n# inside the string\n\"\"\"\n",
            "a = '''\n# inside\n'''\n",
            "# a bell \u{7} in a comment\nmode = \"warn\"\n",
            "# a lone \r carriage return\n",
            "# del \u{7f}\n",
            "# a long comment, then a bell well past the first word \u{7}\n",
            "# a long comment, then a NUL well past the first word \u{0} x\n",
            "k = 1\n# fine\nm = \"\"\"\n# in the string\n\"\"\"\n",
        ] {
            assert!(
                matches!(without_comment_lines(text), Cow::Borrowed(_)),
                "{text:?}"
            );
        }
    }

    #[test]
    fn the_shipped_config_reads_the_same() {
        let shipped = include_str!("../../config/config.toml");
        let emptied = without_comment_lines(shipped);
        assert!(matches!(emptied, Cow::Owned(_)));
        assert_eq!(emptied.lines().count(), shipped.lines().count());
        assert!(emptied.len() * 4 < shipped.len(), "mostly comments");
        let a: toml::Table = shipped.parse().unwrap();
        let b: toml::Table = emptied.parse().unwrap();
        assert_eq!(a, b);
    }
}
