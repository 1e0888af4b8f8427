//! A config file's comment and blank lines, left out before toml reads it.
//!
//! toml lexes and validates a comment byte by byte and makes a token of
//! every line ending, and the shipped config.toml is mostly comments:
//! reading them was most of what a non-GPU container's start cost
//! (integration/bench-start.sh). Outside a multi-line string, a line that
//! is blank or only a comment means nothing in TOML (TOML 1.1,
//! "Comment", "Whitespace", "Newline"), inside an array too, so leaving it
//! out changes no value; [`Content::file_line`] gives back the file's line
//! number of every line that is left, for errors and warnings.

use std::borrow::Cow;

/// The lines of a config file that can mean something, and where each
/// came from.
pub struct Content<'a> {
    text: Cow<'a, str>,
    /// The file's (1-based) line number of each line of `text`; empty
    /// when `text` is the whole file.
    from: Vec<u32>,
}

impl Content<'_> {
    /// What toml reads.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The file's line number of line `line` (1-based) of [`Self::text`].
    pub fn file_line(&self, line: usize) -> usize {
        match self.from.get(line.wrapping_sub(1)) {
            Some(&n) => n as usize,
            // Past the last line (an error at the end of the text): the
            // line after the last one kept, or the file's own number.
            None => self.from.last().map_or(line, |&n| n as usize + 1),
        }
    }
}

/// `text` without its blank lines and the lines whose first non-blank
/// character is `#`; or `text` whole where leaving lines out could change
/// what it means or whether it is valid:
/// - a file with a multi-line string (`"""` or `'''` outside a comment)
///   may have a line that starts inside the string (TOML 1.1, "String");
///   no other string spans lines;
/// - a comment holding a control character other than tab is invalid TOML
///   ("Comment"), which toml must still see to reject;
/// - a file of more than 4 Gi lines (a line number must fit in 32 bits).
pub fn content(text: &str) -> Content<'_> {
    let whole = || Content {
        text: Cow::Borrowed(text),
        from: Vec::new(),
    };
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() / 4);
    let mut from = Vec::with_capacity(256);
    let (mut start, mut line) = (0, 0u32);
    while start < b.len() {
        let Some(next) = line.checked_add(1) else {
            return whole();
        };
        line = next;
        let body = start
            + b[start..]
                .iter()
                .take_while(|&&c| c == b' ' || c == b'\t')
                .count();
        let end = match b.get(body) {
            Some(b'#') => match comment_end(b, body) {
                // comment_end stops at the line's `\r\n` or `\n`.
                Some(ending) => match b.get(ending) {
                    Some(b'\r') => ending + 2,
                    Some(_) => ending + 1,
                    None => ending,
                },
                None => return whole(),
            },
            None => b.len(),
            Some(b'\n') => body + 1,
            Some(b'\r') if b.get(body + 1) == Some(&b'\n') => body + 2,
            _ => {
                let end = line_end(text, start);
                if opens_multiline_string(&b[start..end]) {
                    // Nothing before this line was inside a string.
                    return whole();
                }
                out.push_str(&text[start..end]);
                from.push(line);
                end
            }
        };
        start = end;
    }
    Content {
        text: Cow::Owned(out),
        from,
    }
}

/// Just past the `\n` ending the line that `from` is on (or the end).
fn line_end(text: &str, from: usize) -> usize {
    text[from..].find('\n').map_or(text.len(), |i| from + i + 1)
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

    fn kept(text: &str) -> (String, Vec<usize>) {
        let c = content(text);
        let lines = (1..=c.text().lines().count())
            .map(|l| c.file_line(l))
            .collect();
        (c.text().to_string(), lines)
    }

    #[test]
    fn comment_and_blank_lines_are_left_out_and_lines_known() {
        let text = "# head\nmode = \"warn\" # kept\n  \t# indented\r\n\n  \n[log]\n#last";
        assert_eq!(
            kept(text),
            ("mode = \"warn\" # kept\n[log]\n".into(), vec![2, 6])
        );
        assert_eq!(
            kept("a = [\n  # c\n\n  1,\n]\n"),
            ("a = [\n  1,\n]\n".into(), vec![1, 4, 5])
        );
        // Past eight bytes (the word-at-a-time skip), with a tab, UTF-8 and CRLF.
        let long = "# a comment longer than a word,\twith ünïcödé — and more\r\nk = 1\r\n  ";
        assert_eq!(kept(long), ("k = 1\r\n".into(), vec![2]));
        // An error past the last line kept is on the line after it.
        assert_eq!(content("k = 1\n# end\n").file_line(2), 2);
    }

    #[test]
    fn left_whole_where_leaving_out_could_change_the_meaning() {
        for text in [
            "a = \"\"\"\n# inside the string\n\"\"\"\n",
            "a = \'\'\'\n\n# inside\n\'\'\'\n",
            "# a bell \u{7} in a comment\nmode = \"warn\"\n",
            "# a lone \r carriage return\n",
            "# del \u{7f}\n",
            "# a long comment, then a bell well past the first word \u{7}\n",
            "# a long comment, then a NUL well past the first word \u{0} x\n",
            "k = 1\n# fine\nm = \"\"\"\n# in the string\n\"\"\"\n",
        ] {
            let c = content(text);
            assert_eq!(c.text(), text);
            assert!(matches!(c.text, Cow::Borrowed(_)), "{text:?}");
            assert_eq!(c.file_line(3), 3);
        }
    }

    #[test]
    fn the_shipped_config_reads_the_same() {
        let shipped = include_str!("../../config/config.toml");
        let c = content(shipped);
        assert!(matches!(c.text, Cow::Owned(_)));
        assert!(c.text().len() * 4 < shipped.len(), "mostly comments");
        let a: toml::Table = shipped.parse().unwrap();
        let b: toml::Table = c.text().parse().unwrap();
        assert_eq!(a, b);
        // Every line kept is the file's line of that number.
        let file: Vec<&str> = shipped.lines().collect();
        for (i, l) in c.text().lines().enumerate() {
            assert_eq!(file[c.file_line(i + 1) - 1], l);
        }
    }
}
