//! A JSON reader that accepts what Go's encoding/json accepts, and reads it
//! the way Go does, for the spec files runc decodes (config.json, exec's
//! process.json).
//!
//! runc reads config.json with `json.NewDecoder(f).Decode(&spec)` (runc
//! utils.go loadSpec) and exec's `--process` file the same way (exec.go
//! getProcess). serde_json differs from that decoder in ways a spec can use
//! to hide what runc will do:
//!
//! - nesting: Go allows 10000 levels (encoding/json scanner.go
//!   maxNestingDepth), serde 128. This reader keeps its own stack (no
//!   recursion while parsing) and stops at Go's limit.
//! - numbers: Go checks only the grammar while scanning and converts a number
//!   only when it lands in a numeric field, so `1e99999` in a field runc does
//!   not know is fine. Numbers are kept here as their source text.
//! - strings: Go replaces invalid UTF-8 bytes (one U+FFFD per byte, as
//!   utf8.DecodeRune reports them) and unpaired UTF-16 surrogates in `\u`
//!   escapes with U+FFFD (decode.go unquoteBytes); so does this reader.
//! - duplicate and case-variant keys: objects keep every member, in order,
//!   so the view built from them can apply Go's rules (last key wins, keys
//!   match struct fields case-insensitively, nested structs merge); see
//!   [`crate::oci::spec`].
//! - trailing data: `Decoder.Decode` reads one value and ignores what
//!   follows it; so does [`parse`].
//!
//! Every value remembers the bytes it came from, so a patched file copies
//! what it does not change byte for byte.

use std::ops::Range;

/// Go's maximum nesting depth (encoding/json scanner.go maxNestingDepth).
pub const MAX_DEPTH: usize = 10_000;

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// A number's source text (grammar-checked, never converted).
    Number(String),
    String(String),
    Array(Vec<Node>),
    /// Every member, duplicates included, in source order.
    Object(Vec<Member>),
}

/// A value and the source bytes it was read from (`None` once built or
/// changed by gpu-guard: written out fresh).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub value: Value,
    pub span: Option<Range<usize>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    /// The key, unquoted as Go unquotes it.
    pub key: String,
    /// The key's source bytes, quotes included (`None` once built).
    pub key_span: Option<Range<usize>>,
    pub node: Node,
}

impl Node {
    pub fn new(value: Value) -> Node {
        Node { value, span: None }
    }
    pub fn string(s: impl Into<String>) -> Node {
        Node::new(Value::String(s.into()))
    }
    pub fn as_object(&self) -> Option<&[Member]> {
        match &self.value {
            Value::Object(m) => Some(m),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn is_null(&self) -> bool {
        matches!(self.value, Value::Null)
    }
}

impl Member {
    pub fn new(key: impl Into<String>, node: Node) -> Member {
        Member {
            key: key.into(),
            key_span: None,
            node,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("unexpected end of JSON input")]
    Eof,
    #[error("invalid character {found} {context} at byte {at}")]
    Syntax {
        found: String,
        context: &'static str,
        at: usize,
    },
    #[error("exceeded max depth ({MAX_DEPTH}) at byte {0}")]
    Depth(usize),
}

/// Go's key matching for struct fields: `bytes.EqualFold` (Unicode simple
/// folding; Go 1.21+ encoding/json foldName). For the ASCII field names of
/// the runtime spec only two non-ASCII runes matter: U+017F (long s) folds
/// to `s` and U+212A (Kelvin sign) to `k`.
pub fn fold(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            '\u{017F}' => 's',
            '\u{212A}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// True when Go would decode JSON key `key` into the struct field named
/// `field` (an ASCII name).
pub fn key_matches(key: &str, field: &str) -> bool {
    key == field || fold(key) == fold(field)
}

fn syntax(bytes: &[u8], at: usize, context: &'static str) -> Error {
    match bytes.get(at) {
        None => Error::Eof,
        Some(b) => Error::Syntax {
            found: if b.is_ascii_graphic() {
                format!("'{}'", *b as char)
            } else {
                format!("0x{b:02x}")
            },
            context,
            at,
        },
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

fn hex4(b: &[u8], i: usize) -> Option<u32> {
    let s = b.get(i..i + 4)?;
    let mut v = 0u32;
    for c in s {
        v = v * 16 + (*c as char).to_digit(16)?;
    }
    Some(v)
}

/// Reads the string starting at the quote `b[start]`; returns the decoded
/// text and the index after the closing quote.
fn string(b: &[u8], start: usize) -> Result<(String, usize), Error> {
    let mut out = String::new();
    let mut i = start + 1;
    loop {
        // A run of plain ASCII is copied whole (a spec's strings are
        // mostly that); only escapes, non-ASCII and the end are decoded
        // one at a time.
        let plain = |&c: &u8| (0x20..0x80).contains(&c) && c != b'"' && c != b'\\';
        let run = b
            .get(i..)
            .unwrap_or_default()
            .iter()
            .take_while(|c| plain(c))
            .count();
        if run > 0 {
            out.push_str(std::str::from_utf8(&b[i..i + run]).unwrap_or_default());
            i += run;
        }
        let Some(&c) = b.get(i) else {
            return Err(Error::Eof);
        };
        i = match c {
            b'"' => return Ok((out, i + 1)),
            b'\\' => escape(b, i, &mut out)?,
            c if c < 0x20 => return Err(syntax(b, i, "in string literal")),
            c if c < 0x80 => {
                out.push(c as char);
                i + 1
            }
            c => rune(b, i, c, &mut out),
        };
    }
}

/// Reads the escape whose backslash is `b[i]`; returns the index after it.
fn escape(b: &[u8], i: usize, out: &mut String) -> Result<usize, Error> {
    let Some(&e) = b.get(i + 1) else {
        return Err(Error::Eof);
    };
    let c = match e {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => return unicode_escape(b, i + 2, out),
        _ => return Err(syntax(b, i + 1, "in string escape code")),
    };
    out.push(c);
    Ok(i + 2)
}

/// Reads the four hex digits of a `\u` escape at `b[i]`; returns the
/// index after them (or after the low half of a surrogate pair).
fn unicode_escape(b: &[u8], i: usize, out: &mut String) -> Result<usize, Error> {
    let Some(u) = hex4(b, i) else {
        let bad = (i..i + 4)
            .find(|&j| !b.get(j).is_some_and(|c| c.is_ascii_hexdigit()))
            .unwrap_or(i);
        return Err(syntax(b, bad, "in \\u hexadecimal character escape"));
    };
    let i = i + 4;
    if !(0xD800..0xE000).contains(&u) {
        out.push(char::from_u32(u).unwrap_or('\u{FFFD}'));
        return Ok(i);
    }
    // Go: a valid pair is one rune; anything else is U+FFFD and the next
    // escape is read on its own.
    let low = if b.get(i) == Some(&b'\\') && b.get(i + 1) == Some(&b'u') {
        hex4(b, i + 2)
    } else {
        None
    };
    match low {
        Some(l) if (0xD800..0xDC00).contains(&u) && (0xDC00..0xE000).contains(&l) => {
            let cp = 0x10000 + ((u - 0xD800) << 10) + (l - 0xDC00);
            out.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
            Ok(i + 6)
        }
        _ => {
            out.push('\u{FFFD}');
            Ok(i)
        }
    }
}

/// Reads the non-ASCII byte `b[i]` (`first`): one rune if valid UTF-8 starts there,
/// else U+FFFD for this one byte (utf8.DecodeRune returns RuneError, 1).
/// Returns the index after what was read.
fn rune(b: &[u8], i: usize, first: u8, out: &mut String) -> usize {
    let len = match first {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    };
    match b
        .get(i..i + len)
        .filter(|_| len > 0)
        .and_then(|s| std::str::from_utf8(s).ok())
    {
        Some(s) => {
            out.push_str(s);
            i + len
        }
        None => {
            out.push('\u{FFFD}');
            i + 1
        }
    }
}

/// Checks a number's grammar (`-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?`);
/// returns the index after it.
fn number(b: &[u8], start: usize) -> Result<usize, Error> {
    let digits = |mut i: usize| -> Result<usize, Error> {
        if !b.get(i).is_some_and(|c| c.is_ascii_digit()) {
            return Err(syntax(b, i, "in numeric literal"));
        }
        while b.get(i).is_some_and(|c| c.is_ascii_digit()) {
            i += 1;
        }
        Ok(i)
    };
    let mut i = start;
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i = digits(i)?,
        _ => return Err(syntax(b, i, "in numeric literal")),
    }
    if b.get(i) == Some(&b'.') {
        i = digits(i + 1)?;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits(i)?;
    }
    Ok(i)
}

enum Frame {
    /// start, items so far.
    Array(usize, Vec<Node>),
    /// start, members so far, and the key (text, span) of the value being
    /// read: a frame is opened with its first key and every comma reads the
    /// next one before its value.
    Object(usize, Vec<Member>, String, Range<usize>),
}

/// Parses the first JSON value of `b` as Go's `json.Decoder.Decode` reads
/// it; bytes after that value are ignored, as the decoder leaves them.
/// Containers open frames on a stack of its own (no recursion).
pub fn parse(b: &[u8]) -> Result<Node, Error> {
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = skip_ws(b, 0);
    loop {
        // Here a value starts at b[i] (after whitespace).
        let (node, after) = match b.get(i) {
            Some(&c @ (b'{' | b'[')) => match open(b, i, c == b'{', &mut stack)? {
                Opened::Frame(next) => {
                    i = next;
                    continue;
                }
                Opened::Empty(node, after) => (node, after),
            },
            _ => scalar(b, i)?,
        };
        match hand_up(b, &mut stack, node, after)? {
            Up::Root(node) => return Ok(node),
            Up::Next(next) => i = next,
        }
    }
}

enum Opened {
    /// A frame was pushed; its first value starts at this index.
    Frame(usize),
    /// `{}` or `[]`, and the index after it.
    Empty(Node, usize),
}

/// Opens the object (`is_obj`) or array at `b[start]`.
fn open(b: &[u8], start: usize, is_obj: bool, stack: &mut Vec<Frame>) -> Result<Opened, Error> {
    if stack.len() >= MAX_DEPTH {
        return Err(Error::Depth(start));
    }
    let i = skip_ws(b, start + 1);
    let empty = |value| {
        Ok(Opened::Empty(
            Node {
                value,
                span: Some(start..i + 1),
            },
            i + 1,
        ))
    };
    if is_obj {
        if b.get(i) == Some(&b'}') {
            return empty(Value::Object(Vec::new()));
        }
        let (key, ks, after) = read_key(b, i)?;
        stack.push(Frame::Object(start, Vec::new(), key, ks));
        Ok(Opened::Frame(after))
    } else {
        if b.get(i) == Some(&b']') {
            return empty(Value::Array(Vec::new()));
        }
        stack.push(Frame::Array(start, Vec::new()));
        Ok(Opened::Frame(i))
    }
}

/// Reads the string, literal or number at `b[i]`; returns it and the index
/// after it.
fn scalar(b: &[u8], start: usize) -> Result<(Node, usize), Error> {
    let (value, end) = match b.get(start) {
        None => return Err(Error::Eof),
        Some(b'"') => {
            let (s, after) = string(b, start)?;
            (Value::String(s), after)
        }
        Some(&c @ (b't' | b'f' | b'n')) => {
            let (word, v): (&[u8], Value) = match c {
                b't' => (b"true", Value::Bool(true)),
                b'f' => (b"false", Value::Bool(false)),
                _ => (b"null", Value::Null),
            };
            for (k, w) in word.iter().enumerate() {
                if b.get(start + k) != Some(w) {
                    return Err(syntax(b, start + k, "in literal"));
                }
            }
            (v, start + word.len())
        }
        Some(b'-') | Some(b'0'..=b'9') => {
            let end = number(b, start)?;
            let text = String::from_utf8_lossy(&b[start..end]).into_owned();
            (Value::Number(text), end)
        }
        Some(_) => return Err(syntax(b, start, "looking for beginning of value")),
    };
    let node = Node {
        value,
        span: Some(start..end),
    };
    Ok((node, end))
}

enum Up {
    /// The top-level value is complete.
    Root(Node),
    /// The next value of an open frame starts at this index.
    Next(usize),
}

/// Hands the complete value `node` (ending before `b[i]`) to the enclosing
/// frames, closing every frame it completes.
fn hand_up(b: &[u8], stack: &mut Vec<Frame>, mut node: Node, mut i: usize) -> Result<Up, Error> {
    loop {
        let Some(mut frame) = stack.pop() else {
            return Ok(Up::Root(node));
        };
        i = skip_ws(b, i);
        match &mut frame {
            Frame::Array(_, items) => {
                items.push(node);
                match b.get(i) {
                    Some(b',') => {
                        stack.push(frame);
                        return Ok(Up::Next(skip_ws(b, i + 1)));
                    }
                    Some(b']') => {}
                    _ => return Err(syntax(b, i, "after array element")),
                }
            }
            Frame::Object(_, members, key, ks) => {
                members.push(Member {
                    key: std::mem::take(key),
                    key_span: Some(std::mem::take(ks)),
                    node,
                });
                match b.get(i) {
                    Some(b',') => {
                        let (next, next_span, after) = read_key(b, skip_ws(b, i + 1))?;
                        *key = next;
                        *ks = next_span;
                        stack.push(frame);
                        return Ok(Up::Next(after));
                    }
                    Some(b'}') => {}
                    _ => return Err(syntax(b, i, "after object key:value pair")),
                }
            }
        }
        i += 1;
        node = match frame {
            Frame::Array(s, items) => Node {
                value: Value::Array(items),
                span: Some(s..i),
            },
            Frame::Object(s, members, ..) => Node {
                value: Value::Object(members),
                span: Some(s..i),
            },
        };
    }
}

/// Reads `"key" :` at `b[i]`; returns the key, its span and the index of
/// the value (whitespace skipped).
fn read_key(b: &[u8], i: usize) -> Result<(String, Range<usize>, usize), Error> {
    if b.get(i) != Some(&b'"') {
        return Err(syntax(b, i, "looking for beginning of object key string"));
    }
    let (key, after) = string(b, i)?;
    let colon = skip_ws(b, after);
    if b.get(colon) != Some(&b':') {
        return Err(syntax(b, colon, "after object key"));
    }
    Ok((key, i..after, skip_ws(b, colon + 1)))
}

/// Writes a string as JSON.
pub fn write_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// Writes `node`: source bytes where it has them, else built from its value.
/// Iterative, so a deep value cannot overflow the stack.
pub fn write(out: &mut Vec<u8>, src: &[u8], node: &Node) {
    enum Job<'a> {
        Node(&'a Node),
        Key(&'a Member),
        Raw(&'static [u8]),
    }
    let mut jobs = vec![Job::Node(node)];
    while let Some(job) = jobs.pop() {
        match job {
            Job::Raw(r) => out.extend_from_slice(r),
            Job::Key(m) => {
                match &m.key_span {
                    Some(s) => out.extend_from_slice(&src[s.clone()]),
                    None => write_string(out, &m.key),
                }
                out.push(b':');
            }
            Job::Node(n) => {
                if let Some(s) = &n.span {
                    out.extend_from_slice(&src[s.clone()]);
                    continue;
                }
                match &n.value {
                    Value::Null => out.extend_from_slice(b"null"),
                    Value::Bool(true) => out.extend_from_slice(b"true"),
                    Value::Bool(false) => out.extend_from_slice(b"false"),
                    Value::Number(t) => out.extend_from_slice(t.as_bytes()),
                    Value::String(s) => write_string(out, s),
                    Value::Array(items) => {
                        out.push(b'[');
                        jobs.push(Job::Raw(b"]"));
                        for (k, item) in items.iter().enumerate().rev() {
                            jobs.push(Job::Node(item));
                            if k > 0 {
                                jobs.push(Job::Raw(b","));
                            }
                        }
                    }
                    Value::Object(members) => {
                        out.push(b'{');
                        jobs.push(Job::Raw(b"}"));
                        for (k, m) in members.iter().enumerate().rev() {
                            jobs.push(Job::Node(&m.node));
                            jobs.push(Job::Key(m));
                            if k > 0 {
                                jobs.push(Job::Raw(b","));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A parsed document: dropped without recursion.
pub struct Tree(pub Node);

impl Drop for Tree {
    fn drop(&mut self) {
        drop_deep(std::mem::replace(&mut self.0, Node::new(Value::Null)));
    }
}

/// Drops a tree without recursing (a 10000-deep tree would overflow the
/// stack in the derived drop).
pub fn drop_deep(node: Node) {
    let mut stack = vec![node];
    while let Some(mut n) = stack.pop() {
        match &mut n.value {
            Value::Array(items) => stack.append(items),
            Value::Object(members) => stack.extend(members.drain(..).map(|m| m.node)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(b: &[u8]) -> String {
        parse(b).unwrap().as_str().unwrap().to_string()
    }

    #[test]
    fn strings_as_go_reads_them() {
        assert_eq!(s(br#""\ud800""#), "\u{FFFD}");
        assert_eq!(s(br#""\ud800\u0041""#), "\u{FFFD}A");
        assert_eq!(s(br#""\udc00\ud800""#), "\u{FFFD}\u{FFFD}");
        assert_eq!(s(br#""\ud83d\ude00""#), "\u{1F600}");
        assert_eq!(s(b"\"a\xe2\x82b\""), "a\u{FFFD}\u{FFFD}b");
        assert_eq!(s(b"\"\xff\""), "\u{FFFD}");
        assert_eq!(s(b"\"\xed\xa0\x80\""), "\u{FFFD}\u{FFFD}\u{FFFD}");
        assert_eq!(s(br#""\u0065nv\/""#), "env/");
        assert!(parse(b"\"a\nb\"").is_err());
        assert!(parse(br#""\x""#).is_err());
    }

    #[test]
    fn numbers_are_grammar_checked_not_converted() {
        assert_eq!(
            parse(b"1e99999").unwrap().value,
            Value::Number("1e99999".into())
        );
        for bad in [&b"01"[..], b"1.", b"-", b"1e", b".5", b"+1"] {
            let r = parse(bad);
            // `01` parses as 0 with trailing data, as Go's Decoder reads it.
            if bad == b"01" {
                assert_eq!(r.unwrap().value, Value::Number("0".into()));
            } else {
                assert!(r.is_err(), "{bad:?}");
            }
        }
    }

    #[test]
    fn depth_limit_is_gos() {
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        let n = parse(ok.as_bytes()).unwrap();
        let mut out = Vec::new();
        write(&mut out, ok.as_bytes(), &n);
        drop_deep(n);
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(matches!(parse(deep.as_bytes()), Err(Error::Depth(_))));
    }

    #[test]
    fn keeps_duplicates_and_trailing_data_is_ignored() {
        let n = parse(br#" {"a":1,"A":2,"a":{"b":[true,null]}} trailing"#).unwrap();
        let m = n.as_object().unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].key, "A");
        assert!(parse(b"{\"a\" 1}").is_err());
        assert!(parse(b"{\"a\":1,}").is_err());
        assert!(parse(b"[1,]").is_err());
        assert!(parse(b"{").is_err());
        assert!(parse(b"").is_err());
    }

    #[test]
    fn writes_built_nodes_and_copies_source() {
        let src = br#"{ "x" : [1, 2e5 ], "y":"\ud800"}"#;
        let n = parse(src).unwrap();
        let mut out = Vec::new();
        write(&mut out, src, &n);
        assert_eq!(out, src.to_vec());
        let built = Node::new(Value::Object(vec![
            Member::new("k\"", Node::string("a\u{1}\u{FFFD}")),
            Member::new("n", n.as_object().unwrap()[0].node.clone()),
        ]));
        let mut out = Vec::new();
        write(&mut out, src, &built);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"k\\\"\":\"a\\u0001\u{FFFD}\",\"n\":[1, 2e5 ]}"
        );
    }

    #[test]
    fn folding_is_gos() {
        assert!(key_matches("NoNewPrivileges", "noNewPrivileges"));
        assert!(key_matches("proce\u{017F}\u{017F}", "process"));
        assert!(key_matches("\u{212A}ey", "key"));
        assert!(!key_matches("envs", "env"));
        assert!(!key_matches("\u{0130}d", "id"));
    }
}
