//! Deprecated spellings a config file still reads, found for a warning.
//! The parse itself accepts them ([`crate::core::enforcement`]); this scan
//! only names where they are, so the operator can write the current word.
//! It reads lines, not the TOML tree: the config is parsed once per
//! container start, and a second parse for a warning would double that.

use super::comments::Content;
use crate::core::enforcement::DEPRECATED_REFUSE;
use std::path::Path;

/// One warning per `key = "refuse"` line of `text` whose key (under its
/// `[table]` header, or dotted) reads `refuse` as a deprecated spelling of
/// `enforce`, naming the file and line.
pub fn warnings(file: &Path, content: &Content) -> Vec<String> {
    let text = content.text();
    // Only the lines that say `refuse` are read: the scan runs at every
    // container start, and such lines are rare.
    let mut out = Vec::new();
    let mut last_line = None;
    for (at, _) in text.match_indices("refuse") {
        let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        if last_line == Some(start) {
            continue;
        }
        last_line = Some(start);
        let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
        let Some(key) = refuse_key(&text[start..end]) else {
            continue;
        };
        let full = match table_above(&text[..start]) {
            Some(table) => format!("{table}.{key}"),
            None => key,
        };
        if DEPRECATED_REFUSE.contains(&full.as_str()) {
            out.push(format!(
                "{}:{}: {full} = \"refuse\" is deprecated; write \"enforce\" (same meaning)",
                file.display(),
                content.file_line(text[..start].matches('\n').count() + 1)
            ));
        }
    }
    out
}

/// The key of a `key = "refuse"` line (spaces in a dotted key dropped).
fn refuse_key(line: &str) -> Option<String> {
    let (key, value) = line.trim().split_once('=')?;
    let value = value.split('#').next().unwrap_or_default().trim();
    (value == "\"refuse\"" || value == "'refuse'").then(|| key.trim().replace(' ', ""))
}

/// The `[table]` header nearest above, if any.
fn table_above(before: &str) -> Option<String> {
    before.lines().rev().find_map(|l| {
        let t = l.trim().strip_prefix('[')?.strip_suffix(']')?;
        Some(t.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::super::comments::content;
    use super::*;

    #[test]
    fn names_each_deprecated_word_and_nothing_else() {
        let text = "[host]\non_probe_failure = \"refuse\"\n\n[compat]\nmissing_library = \"refuse\" # old\n[kernel_image]\non_incomplete = 'refuse'\n# on_incomplete = \"refuse\"\n[libraries]\non_incomplete = \"enforce\"\n";
        let w = warnings(Path::new("/etc/gpu-guard/config.toml"), &content(text));
        assert_eq!(
            w,
            [
                "/etc/gpu-guard/config.toml:5: compat.missing_library = \"refuse\" is deprecated; write \"enforce\" (same meaning)",
                "/etc/gpu-guard/config.toml:7: kernel_image.on_incomplete = \"refuse\" is deprecated; write \"enforce\" (same meaning)",
            ]
        );
        assert!(
            warnings(
                Path::new("x"),
                &content("libraries.on_incomplete = \"refuse\"\n")
            )
            .len()
                == 1
        );
        assert!(warnings(
            Path::new("x"),
            &content("[host]\non_probe_failure = \"refuse\"\n")
        )
        .is_empty());
    }
}
