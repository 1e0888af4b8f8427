//! Search path elements as ld.so expands them (elf/dl-load.c
//! `fillin_rpath`, `_dl_dst_substitute`, `is_dst`): split on `:` (and `;`
//! for `LD_LIBRARY_PATH`); an empty element is the working directory;
//! `$ORIGIN`, `$LIB` and `$PLATFORM` (also `${...}`) replaced, an element
//! whose token has no value dropped; trailing slashes trimmed, one added;
//! repeated elements kept once.

use super::platform::Platform;

/// `fillin_rpath`: the elements of a search path, expanded.
pub fn decompose(list: &str, seps: &str, origin: &str, plat: &Platform) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if list.is_empty() {
        return out;
    }
    for elem in list.split(|c| seps.contains(c)) {
        let mut d = if elem.is_empty() {
            String::new()
        } else {
            match substitute(elem, origin, plat) {
                Some(s) if !s.is_empty() => s,
                _ => continue,
            }
        };
        while d.len() > 1 && d.ends_with('/') {
            d.pop();
        }
        if !d.is_empty() && !d.ends_with('/') {
            d.push('/');
        }
        if !out.contains(&d) {
            out.push(d);
        }
    }
    out
}

/// `_dl_dst_substitute`: None when a known token has no value.
pub fn substitute(input: &str, origin: &str, plat: &Platform) -> Option<String> {
    let b = input.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            let ch = input[i..].chars().next()?;
            out.push(ch);
            i += ch.len_utf8();
            continue;
        }
        let rest = &input[i + 1..];
        let (len, value) = if let Some(n) = is_dst(rest, "ORIGIN") {
            (n, (!origin.is_empty()).then(|| origin.to_string()))
        } else if let Some(n) = is_dst(rest, "PLATFORM") {
            (n, Some(plat.platform().to_string()))
        } else if let Some(n) = is_dst(rest, "LIB") {
            (n, Some(plat.lib.clone()))
        } else {
            out.push('$');
            i += 1;
            continue;
        };
        out.push_str(&value?);
        i += 1 + len;
    }
    Some(out)
}

/// elf/dl-load.c `is_dst`: the length of the token `name` (with its braces)
/// at the start of `input`, following the gABI rules.
fn is_dst(input: &str, name: &str) -> Option<usize> {
    let (curly, body) = match input.strip_prefix('{') {
        Some(b) => (true, b),
        None => (false, input),
    };
    let after = body.strip_prefix(name)?;
    if curly {
        after.strip_prefix('}')?;
        return Some(name.len() + 2);
    }
    match after.bytes().next() {
        Some(c) if c.is_ascii_alphanumeric() || c == b'_' => None,
        _ => Some(name.len()),
    }
}

/// `$ORIGIN` of an object loaded from `realname` (relative to `cwd`):
/// the directory of the path as it was opened, symlinks not resolved
/// (elf/dl-object.c `_dl_get_origin` on the name `_dl_map_object` used).
pub(super) fn origin_of(realname: &str, cwd: &str) -> String {
    let full = if realname.starts_with('/') {
        realname.to_string()
    } else if cwd.ends_with('/') {
        format!("{cwd}{realname}")
    } else {
        format!("{cwd}/{realname}")
    };
    match full.rfind('/') {
        Some(0) | None => "/".to_string(),
        Some(i) => full[..i].to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dst_tokens() {
        assert_eq!(is_dst("ORIGIN/../lib", "ORIGIN"), Some(6));
        assert_eq!(is_dst("{ORIGIN}/x", "ORIGIN"), Some(8));
        assert_eq!(is_dst("ORIGINAL", "ORIGIN"), None);
        assert_eq!(is_dst("{ORIGIN", "ORIGIN"), None);
        assert_eq!(is_dst("LIB", "LIB"), Some(3));
    }
}

#[cfg(test)]
mod origin_tests {
    use super::origin_of;

    #[test]
    fn origin_is_the_directory_as_opened() {
        assert_eq!(origin_of("/opt/x/lib/libfoo.so", "/"), "/opt/x/lib");
        assert_eq!(origin_of("/libfoo.so", "/"), "/");
        assert_eq!(origin_of("lib/libfoo.so", "/app"), "/app/lib");
        assert_eq!(origin_of("libfoo.so", "/app/"), "/app");
    }
}
