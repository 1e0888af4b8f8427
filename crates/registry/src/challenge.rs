//! `WWW-Authenticate` challenges (RFC 7235 section 4.1, auth-params with
//! quoted strings) as registries send them: `Bearer realm="...",
//! service="...",scope="..."` (distribution `docs/spec/auth/token.md`) or
//! `Basic realm="..."`.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// Lowercased: `bearer`, `basic`.
    pub scheme: String,
    /// Parameter names lowercased.
    pub params: BTreeMap<String, String>,
}

impl Challenge {
    pub fn param(&self, k: &str) -> Option<&str> {
        self.params.get(k).map(String::as_str)
    }
}

/// Parses one header value. Several challenges in one value (`Basic
/// realm=x, Bearer realm=y`) are split at a token followed by a space that
/// is not a parameter.
pub fn parse(header: &str) -> Vec<Challenge> {
    let mut out: Vec<Challenge> = Vec::new();
    let b = header.as_bytes();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && (b[*i] == b' ' || b[*i] == b'\t' || b[*i] == b',') {
            *i += 1;
        }
    };
    let token = |i: &mut usize| {
        let s = *i;
        while *i < b.len() && !matches!(b[*i], b' ' | b'\t' | b',' | b'=' | b'"') {
            *i += 1;
        }
        header[s..*i].to_string()
    };
    loop {
        skip_ws(&mut i);
        if i >= b.len() {
            break;
        }
        let t = token(&mut i);
        if t.is_empty() {
            // A stray quote or `=`: stop rather than loop.
            break;
        }
        if i < b.len() && b[i] == b'=' {
            // A parameter of the current challenge.
            i += 1;
            let v = if i < b.len() && b[i] == b'"' {
                i += 1;
                let mut v = String::new();
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        i += 1;
                    }
                    let ch = header[i..].chars().next().unwrap_or(' ');
                    v.push(ch);
                    i += ch.len_utf8();
                }
                i += 1;
                v
            } else {
                token(&mut i)
            };
            if let Some(c) = out.last_mut() {
                c.params.insert(t.to_ascii_lowercase(), v);
            }
        } else {
            out.push(Challenge {
                scheme: t.to_ascii_lowercase(),
                params: BTreeMap::new(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_and_basic() {
        let c = parse(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull,push""#,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].scheme, "bearer");
        assert_eq!(c[0].param("realm"), Some("https://auth.docker.io/token"));
        assert_eq!(
            c[0].param("scope"),
            Some("repository:library/busybox:pull,push")
        );
        let c = parse(r#"Basic realm="Registry Realm", Bearer realm=x,Service="a\"b""#);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].param("realm"), Some("Registry Realm"));
        assert_eq!(c[1].param("realm"), Some("x"));
        assert_eq!(c[1].param("service"), Some("a\"b"));
        assert!(parse("").is_empty());
        assert_eq!(parse("\"=\"=").len(), 0);
    }
}
