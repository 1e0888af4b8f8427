//! Deprecated spellings a config file still reads, found for a warning.
//! The parse itself accepts them ([`crate::core::enforcement`]); this scan
//! only names where they are, so the operator can write the current word.
//! It reads lines, not the TOML tree: the config is parsed once per
//! container start, and a second parse for a warning would double that.

use crate::core::enforcement::DEPRECATED_REFUSE;
use std::path::Path;

/// One warning per `key = "refuse"` line of `text` whose key (under its
/// `[table]` header, or dotted) reads `refuse` as a deprecated spelling of
/// `enforce`, naming the file and line.
pub fn warnings(file: &Path, text: &str) -> Vec<String> {
    if !text.contains("refuse") {
        return Vec::new();
    }
    let mut table = String::new();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let l = line.trim();
        if let Some(t) = l.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            table = t.trim().to_string();
            continue;
        }
        let Some((key, value)) = l.split_once('=') else {
            continue;
        };
        let value = value.split('#').next().unwrap_or_default().trim();
        if value != "\"refuse\"" && value != "'refuse'" {
            continue;
        }
        let key = key.trim().replace(' ', "");
        let full = if table.is_empty() {
            key
        } else {
            format!("{table}.{key}")
        };
        if DEPRECATED_REFUSE.contains(&full.as_str()) {
            out.push(format!(
                "{}:{}: {full} = \"refuse\" is deprecated; write \"enforce\" (same meaning)",
                file.display(),
                n + 1
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_each_deprecated_word_and_nothing_else() {
        let text = "[host]\non_probe_failure = \"refuse\"\n\n[compat]\nmissing_library = \"refuse\" # old\n[kernel_image]\non_incomplete = 'refuse'\n# on_incomplete = \"refuse\"\n[libraries]\non_incomplete = \"enforce\"\n";
        let w = warnings(Path::new("/etc/gpu-guard/config.toml"), text);
        assert_eq!(
            w,
            [
                "/etc/gpu-guard/config.toml:5: compat.missing_library = \"refuse\" is deprecated; write \"enforce\" (same meaning)",
                "/etc/gpu-guard/config.toml:7: kernel_image.on_incomplete = \"refuse\" is deprecated; write \"enforce\" (same meaning)",
            ]
        );
        assert!(warnings(Path::new("x"), "libraries.on_incomplete = \"refuse\"\n").len() == 1);
        assert!(warnings(Path::new("x"), "[host]\non_probe_failure = \"refuse\"\n").is_empty());
    }
}
