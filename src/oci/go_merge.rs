//! The runtime-spec `Process` as runc's Go decoder reads it, for rewriting
//! the process of a spec ([`crate::oci::spec_file`]):
//!
//! - the schema: which fields of specs-go `Process` (opencontainers/runtime-spec
//!   specs-go/config.go) are structs, pointers, lists or scalars, and of
//!   which Go type;
//! - [`merge`]: every `process` object (duplicates, case variants) decoded
//!   into one, field by field, as encoding/json decodes a repeated key into
//!   the value already there (decode.go `object`, `array`, `literalStore`);
//! - [`process_type_error`]: the first value Go's decoder cannot store in
//!   its field. Go records such an error (`decodeState.saveError`), keeps
//!   decoding, and returns it at the end, so a type error anywhere, even in
//!   a value a later duplicate replaces, fails the whole decode: runc
//!   (`loadSpec`, exec's `getProcess`: `json.NewDecoder(f).Decode`) refuses
//!   the spec.
//!
//! Fields that runtime-spec added after the version runc 1.1 builds with
//! (runc go.mod: runtime-spec 1c3f411f0417; Debian's runc 1.1.5 uses
//! 5cfc4c3, the same `Process`) are marked `newer`: runc 1.1 skips them as
//! unknown, later runtimes decode them. The merge keeps a type error in any
//! field as written ([`Out::Refused`]), so whichever runtime reads the
//! rewritten spec refuses it exactly when it would refuse the original.

use crate::oci::gojson::{self, key_matches, Member, Node, Value};
use std::borrow::Cow;

/// The Go type of a scalar field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prim {
    Str,
    Bool,
    /// An unsigned integer of this many bits (`uint` is 64 on runc's hosts).
    Uint(u32),
    /// A signed integer of this many bits (`int` is 64).
    Int(u32),
}

impl Prim {
    /// Does Go store this JSON value in a field of this type? null always
    /// (ignored or clearing); a number only as an integer literal that fits
    /// (strconv.ParseUint/ParseInt and the Overflow check of literalStore).
    fn accepts(self, v: &Value) -> bool {
        match (self, v) {
            (_, Value::Null) | (Prim::Str, Value::String(_)) | (Prim::Bool, Value::Bool(_)) => true,
            (Prim::Uint(bits), Value::Number(t)) => {
                t.parse::<u64>().is_ok_and(|n| bits >= 64 || n >> bits == 0)
            }
            (Prim::Int(bits), Value::Number(t)) => t.parse::<i64>().is_ok_and(|n| {
                bits >= 64 || (-(1i64 << (bits - 1))..(1i64 << (bits - 1))).contains(&n)
            }),
            _ => false,
        }
    }

    fn go_name(self) -> &'static str {
        match self {
            Prim::Str => "string",
            Prim::Bool => "bool",
            Prim::Uint(32) => "uint32",
            Prim::Uint(_) => "uint64",
            Prim::Int(32) => "int32",
            Prim::Int(_) => "int",
        }
    }

    /// The zero value, written where a list grew under a null element.
    fn zero(self) -> &'static [u8] {
        match self {
            Prim::Str => b"\"\"",
            Prim::Bool => b"false",
            Prim::Uint(_) | Prim::Int(_) => b"0",
        }
    }
}

/// How Go decodes a field of specs-go Process (and its structs) when the
/// field appears again.
#[derive(Clone, Copy)]
pub enum Kind {
    /// string, bool, number: replaced; null ignored.
    Scalar(Prim),
    /// pointer to a scalar: replaced; null clears.
    Opt(Prim),
    /// slice of scalars: decoded element by element into the elements
    /// already there (decode.go array; a null element leaves one as it
    /// is); null clears it, `[]` makes a fresh one.
    List(Prim),
    /// pointer to struct: merged; null clears.
    Ptr(&'static [Field]),
    /// struct: merged; null ignored.
    Struct(&'static [Field]),
    /// slice of structs: element by element as [`Kind::List`], each
    /// element merged as a struct, including those a shorter list left
    /// past its end.
    StructList(&'static [Field]),
}

pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
    /// Added to runtime-spec after the version runc 1.1 builds with.
    pub newer: bool,
}

const fn f(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        newer: false,
    }
}

const fn newer(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        newer: true,
    }
}

const STR: Kind = Kind::Scalar(Prim::Str);
const U64: Kind = Kind::Scalar(Prim::Uint(64));
const STRINGS: Kind = Kind::List(Prim::Str);

/// specs-go LinuxCapabilities, in [`crate::core::container::Capabilities::SETS`] order.
pub const CAPS: &[Field] = &[
    f("bounding", STRINGS),
    f("effective", STRINGS),
    f("inheritable", STRINGS),
    f("permitted", STRINGS),
    f("ambient", STRINGS),
];
/// specs-go POSIXRlimit.
const RLIMIT: &[Field] = &[f("type", STR), f("hard", U64), f("soft", U64)];
/// specs-go Box.
const BOX: &[Field] = &[f("height", U64), f("width", U64)];
/// specs-go User.
const USER: &[Field] = &[
    f("uid", Kind::Scalar(Prim::Uint(32))),
    f("gid", Kind::Scalar(Prim::Uint(32))),
    f("umask", Kind::Opt(Prim::Uint(32))),
    f("additionalGids", Kind::List(Prim::Uint(32))),
    f("username", STR),
];
/// specs-go Scheduler (runtime-spec v1.1.0).
const SCHEDULER: &[Field] = &[
    f("policy", STR),
    f("nice", Kind::Scalar(Prim::Int(32))),
    f("priority", Kind::Scalar(Prim::Int(32))),
    f("flags", STRINGS),
    f("runtime", U64),
    f("deadline", U64),
    f("period", U64),
];
/// specs-go LinuxIOPriority (runtime-spec v1.1.0).
const IO_PRIORITY: &[Field] = &[f("class", STR), f("priority", Kind::Scalar(Prim::Int(64)))];
/// specs-go CPUAffinity (runtime-spec v1.2.1).
const CPU_AFFINITY: &[Field] = &[f("initial", STR), f("final", STR)];
/// specs-go Process (runtime-spec v1.3.0).
pub const PROCESS: &[Field] = &[
    f("terminal", Kind::Scalar(Prim::Bool)),
    f("consoleSize", Kind::Ptr(BOX)),
    f("user", Kind::Struct(USER)),
    f("args", STRINGS),
    f("commandLine", STR),
    f("env", STRINGS),
    f("cwd", STR),
    f("capabilities", Kind::Ptr(CAPS)),
    f("rlimits", Kind::StructList(RLIMIT)),
    f("noNewPrivileges", Kind::Scalar(Prim::Bool)),
    f("apparmorProfile", STR),
    f("oomScoreAdj", Kind::Opt(Prim::Int(64))),
    newer("scheduler", Kind::Ptr(SCHEDULER)),
    f("selinuxLabel", STR),
    newer("ioPriority", Kind::Ptr(IO_PRIORITY)),
    newer("execCPUAffinity", Kind::Ptr(CPU_AFFINITY)),
];

/// The field Go decodes key `key` into: an exact match, else the first
/// that folds to it (encoding/json `object`; no two fields here fold alike).
fn field_for<'f>(fields: &'f [Field], key: &str) -> Option<&'f Field> {
    fields.iter().find(|f| key_matches(key, f.name))
}

/// A value Go's decoder cannot store in its field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode {found} into `{field}` ({want})")]
pub struct TypeError {
    /// The field, as `process.user.uid`.
    pub field: String,
    /// What the spec holds there: `string`, `number`, `bool`, `array`, `object`.
    pub found: &'static str,
    /// What Go expects there.
    pub want: &'static str,
}

fn found_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn mismatch(path: &str, node: &Node, want: &'static str) -> Option<TypeError> {
    Some(TypeError {
        field: path.to_string(),
        found: found_name(&node.value),
        want,
    })
}

/// The first type error Go reports decoding `node` into a field of `kind`
/// at `path`; `newer` also checks the fields runc 1.1 does not know.
fn type_error(node: &Node, kind: Kind, newer: bool, path: &str) -> Option<TypeError> {
    match (kind, &node.value) {
        (_, Value::Null) => None,
        (Kind::Scalar(p) | Kind::Opt(p), v) => {
            if p.accepts(v) {
                None
            } else {
                mismatch(path, node, p.go_name())
            }
        }
        (Kind::List(p), Value::Array(list)) => list
            .iter()
            .find(|n| !p.accepts(&n.value))
            .and_then(|n| mismatch(path, n, p.go_name())),
        (Kind::Ptr(fields) | Kind::Struct(fields), Value::Object(ms)) => {
            members_error(ms, fields, newer, path)
        }
        (Kind::StructList(fields), Value::Array(list)) => {
            list.iter().find_map(|n| match &n.value {
                Value::Null => None,
                Value::Object(ms) => members_error(ms, fields, newer, path),
                _ => mismatch(path, n, "object"),
            })
        }
        (Kind::List(_) | Kind::StructList(_), _) => mismatch(path, node, "array"),
        (Kind::Ptr(_) | Kind::Struct(_), _) => mismatch(path, node, "object"),
    }
}

/// The first type error among a struct's members (unknown keys are
/// skipped unread, as Go skips them).
fn members_error(ms: &[Member], fields: &[Field], newer: bool, path: &str) -> Option<TypeError> {
    ms.iter().find_map(|m| {
        let f = field_for(fields, &m.key).filter(|f| newer || !f.newer)?;
        type_error(&m.node, f.kind, newer, &format!("{path}.{}", f.name))
    })
}

/// Whether the spec file's top level is the config.json or an exec process.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// config.json: the process is the top-level `process` member(s).
    Spec,
    /// exec's process.json: the top-level object is the process.
    Process,
}

/// The first type error runc's decoder meets in the process of a spec
/// file whose top-level object holds `top`: in every `process` object (or
/// the file itself for [`Target::Process`]), duplicates and objects a later
/// `null` clears included. `newer`: also in the fields runc 1.1 skips.
pub fn process_type_error(top: &[Member], target: Target, newer: bool) -> Option<TypeError> {
    match target {
        Target::Process => members_error(top, PROCESS, newer, "process"),
        Target::Spec => top
            .iter()
            .filter(|m| key_matches(&m.key, "process"))
            .find_map(|m| type_error(&m.node, Kind::Ptr(PROCESS), newer, "process")),
    }
}

/// A value of the merged output: source nodes by reference, merged objects
/// and fresh values built here.
pub enum Out<'a> {
    Src(&'a Node),
    /// A value Go fails to decode into its field: kept as written, and
    /// never replaced or cleared by a later duplicate, so that a runtime
    /// that knows the field refuses the rewritten spec as it refuses the
    /// original.
    Refused(&'a Node),
    Obj(Vec<OutMember<'a>>),
    Built(Node),
    /// A slice: `len` elements over a backing array.
    List(Vec<Elem<'a>>, usize),
}

/// An element of a merged slice.
pub enum Elem<'a> {
    Node(&'a Node),
    /// The zero value of a scalar element a null left unset.
    Zero(Prim),
    Obj(Vec<OutMember<'a>>),
}

pub struct OutMember<'a> {
    pub key: Cow<'a, str>,
    /// The source member whose key bytes to copy (unknown fields).
    pub src: Option<&'a Member>,
    pub val: Out<'a>,
}

fn position(acc: &[OutMember], key: &str) -> Option<usize> {
    acc.iter().position(|m| m.key == key)
}

/// Sets field `key` of a merged object, unless it holds a refused value.
pub fn set<'a>(acc: &mut Vec<OutMember<'a>>, key: &'static str, val: Out<'a>) {
    match position(acc, key) {
        Some(i) if matches!(acc[i].val, Out::Refused(_)) => {}
        Some(i) => acc[i].val = val,
        None => acc.push(OutMember {
            key: Cow::Borrowed(key),
            src: None,
            val,
        }),
    }
}

/// The index of field `key`, added with `empty` when absent; a value of
/// another shape there (from an earlier duplicate) is replaced by `empty`.
fn slot<'a>(
    acc: &mut Vec<OutMember<'a>>,
    key: &'static str,
    fits: fn(&Out) -> bool,
    empty: fn() -> Out<'a>,
) -> usize {
    let i = match position(acc, key) {
        Some(i) => i,
        None => {
            acc.push(OutMember {
                key: Cow::Borrowed(key),
                src: None,
                val: empty(),
            });
            acc.len() - 1
        }
    };
    if !fits(&acc[i].val) {
        acc[i].val = empty();
    }
    i
}

/// What a `null` process does: clears everything but refused values.
pub fn clear(acc: &mut Vec<OutMember>) {
    acc.retain(|m| matches!(m.val, Out::Refused(_)));
}

/// Why the merge cannot reproduce Go's result: a list element of a struct
/// list that is neither an object nor null (a type error that
/// [`process_type_error`] reports first).
#[derive(Debug)]
pub struct Unmergeable(pub &'static str);

/// Decodes `obj` into the merged struct `acc` as Go would; `path` names
/// the struct lists for [`Unmergeable`].
pub fn merge<'a>(
    acc: &mut Vec<OutMember<'a>>,
    obj: &'a [Member],
    schema: &'static [Field],
    path: &'static str,
) -> Result<(), Unmergeable> {
    for m in obj {
        let Some(field) = field_for(schema, &m.key) else {
            keep_unknown(acc, m);
            continue;
        };
        if position(acc, field.name).is_some_and(|i| matches!(acc[i].val, Out::Refused(_))) {
            continue;
        }
        if type_error(&m.node, field.kind, true, field.name).is_some() {
            set(acc, field.name, Out::Refused(&m.node));
            continue;
        }
        merge_field(acc, field, &m.node, path)?;
    }
    Ok(())
}

/// A field runc does not know: kept (the last of one spelling wins), never
/// read.
fn keep_unknown<'a>(acc: &mut Vec<OutMember<'a>>, m: &'a Member) {
    match acc.iter().position(|o| o.src.is_some() && o.key == m.key) {
        Some(i) => acc[i].val = Out::Src(&m.node),
        None => acc.push(OutMember {
            key: Cow::Borrowed(&m.key),
            src: Some(m),
            val: Out::Src(&m.node),
        }),
    }
}

/// Decodes one value of `field` (of the right type) into `acc`.
fn merge_field<'a>(
    acc: &mut Vec<OutMember<'a>>,
    field: &'static Field,
    node: &'a Node,
    path: &'static str,
) -> Result<(), Unmergeable> {
    match (field.kind, &node.value) {
        (Kind::Scalar(_) | Kind::Struct(_), Value::Null) => {}
        (_, Value::Null) => {
            if let Some(i) = position(acc, field.name) {
                acc.remove(i);
            }
        }
        (Kind::Ptr(sub) | Kind::Struct(sub), Value::Object(members)) => {
            let i = slot(
                acc,
                field.name,
                |o| matches!(o, Out::Obj(_)),
                || Out::Obj(Vec::new()),
            );
            if let Out::Obj(inner) = &mut acc[i].val {
                merge(inner, members, sub, path)?;
            }
        }
        (Kind::List(p), Value::Array(items)) => merge_list(acc, field.name, node, items, p),
        (Kind::StructList(sub), Value::Array(items)) => {
            merge_struct_list(acc, field.name, items, sub, path)?
        }
        _ => set(acc, field.name, Out::Src(node)),
    }
    Ok(())
}

/// A slice of scalars. Its first value is kept as written; a later one is
/// decoded into it element by element.
fn merge_list<'a>(
    acc: &mut Vec<OutMember<'a>>,
    name: &'static str,
    node: &'a Node,
    items: &'a [Node],
    prim: Prim,
) {
    let Some(i) = position(acc, name) else {
        set(acc, name, Out::Src(node));
        return;
    };
    if items.is_empty() {
        acc[i].val = Out::Src(node);
        return;
    }
    // The first value, written as it was, becomes the backing array.
    let first = match acc[i].val {
        Out::Src(n) => n.as_array(),
        _ => None,
    };
    if let Some(old) = first {
        acc[i].val = Out::List(old.iter().map(Elem::Node).collect(), old.len());
    }
    if !matches!(acc[i].val, Out::List(..)) {
        acc[i].val = Out::List(Vec::new(), 0);
    }
    if let Out::List(backing, len) = &mut acc[i].val {
        for (k, item) in items.iter().enumerate() {
            if k >= backing.len() {
                backing.push(Elem::Zero(prim));
            }
            if !item.is_null() {
                backing[k] = Elem::Node(item);
            }
        }
        *len = items.len();
    }
}

/// A slice of structs, merged element by element into the backing array.
fn merge_struct_list<'a>(
    acc: &mut Vec<OutMember<'a>>,
    name: &'static str,
    items: &'a [Node],
    sub: &'static [Field],
    path: &'static str,
) -> Result<(), Unmergeable> {
    if items.is_empty() {
        set(acc, name, Out::List(Vec::new(), 0));
        return Ok(());
    }
    let i = slot(
        acc,
        name,
        |o| matches!(o, Out::List(..)),
        || Out::List(Vec::new(), 0),
    );
    if let Out::List(backing, len) = &mut acc[i].val {
        for (k, item) in items.iter().enumerate() {
            if k >= backing.len() {
                backing.push(Elem::Obj(Vec::new()));
            }
            match (&mut backing[k], &item.value) {
                // null leaves a struct as it is.
                (_, Value::Null) => {}
                (Elem::Obj(inner), Value::Object(ms)) => merge(inner, ms, sub, path)?,
                _ => return Err(Unmergeable(path)),
            }
        }
        *len = items.len();
    }
    Ok(())
}

fn write_key(out: &mut Vec<u8>, src: &[u8], m: &Member) {
    match &m.key_span {
        Some(s) => out.extend_from_slice(&src[s.clone()]),
        None => gojson::write_string(out, &m.key),
    }
    out.push(b':');
}

/// Writes a top-level member as it was read.
pub fn write_member(out: &mut Vec<u8>, src: &[u8], m: &Member) {
    write_key(out, src, m);
    gojson::write(out, src, &m.node);
}

/// Writes a merged object (its nesting is the schema's, at most 3 deep).
pub fn write_obj(out: &mut Vec<u8>, src: &[u8], members: &[OutMember]) {
    out.push(b'{');
    for (i, m) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match m.src {
            Some(sm) => write_key(out, src, sm),
            None => {
                gojson::write_string(out, &m.key);
                out.push(b':');
            }
        }
        match &m.val {
            Out::Src(n) | Out::Refused(n) => gojson::write(out, src, n),
            Out::Built(n) => gojson::write(out, src, n),
            Out::Obj(inner) => write_obj(out, src, inner),
            Out::List(backing, len) => {
                out.push(b'[');
                for (k, item) in backing.iter().take(*len).enumerate() {
                    if k > 0 {
                        out.push(b',');
                    }
                    match item {
                        Elem::Node(n) => gojson::write(out, src, n),
                        Elem::Zero(p) => out.extend_from_slice(p.zero()),
                        Elem::Obj(o) => write_obj(out, src, o),
                    }
                }
                out.push(b']');
            }
        }
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn top(text: &str) -> Vec<Member> {
        match gojson::parse(text.as_bytes()).unwrap().value {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    fn spec_error(text: &str, newer: bool) -> Option<String> {
        process_type_error(&top(text), Target::Spec, newer).map(|e| e.field)
    }

    #[test]
    fn type_errors_anywhere_in_the_process_are_found() {
        for (text, field) in [
            // hidden by a later duplicate: Go still reports it
            (
                r#"{"process":{"cwd":5},"process":{"cwd":"/"}}"#,
                "process.cwd",
            ),
            (r#"{"process":{"cwd":5,"cwd":"/"}}"#, "process.cwd"),
            (
                r#"{"proce\u017f\u017f":{"Cwd":5},"process":{"cwd":"/"}}"#,
                "process.cwd",
            ),
            (r#"{"process":{"cwd":5},"process":null}"#, "process.cwd"),
            // nested, in lists, out of range
            (r#"{"process":{"user":{"uid":-1}}}"#, "process.user.uid"),
            (
                r#"{"process":{"user":{"uid":4294967296}}}"#,
                "process.user.uid",
            ),
            (
                r#"{"process":{"user":{"additionalGids":[1,"2"]}}}"#,
                "process.user.additionalGids",
            ),
            (r#"{"process":{"args":["a",1]}}"#, "process.args"),
            (
                r#"{"process":{"rlimits":[null,{"hard":1.5}]}}"#,
                "process.rlimits.hard",
            ),
            (r#"{"process":{"rlimits":[5]}}"#, "process.rlimits"),
            (
                r#"{"process":{"consoleSize":{"height":-0}}}"#,
                "process.consoleSize.height",
            ),
            (r#"{"process":{"oomScoreAdj":"1"}}"#, "process.oomScoreAdj"),
            (r#"{"process":{"user":5}}"#, "process.user"),
            (r#"{"process":[]}"#, "process"),
            // the first one in document order
            (r#"{"process":{"terminal":1,"cwd":5}}"#, "process.terminal"),
        ] {
            assert_eq!(spec_error(text, false).as_deref(), Some(field), "{text}");
        }
        for text in [
            r#"{"process":{"cwd":"/","user":{"uid":4294967295},"oomScoreAdj":-1}}"#,
            r#"{"process":null,"process":{"args":[null]},"zzz":{"cwd":5}}"#,
            r#"{"process":{"unknown":{"cwd":5},"rlimits":[null]}}"#,
            // runc 1.1 does not know the scheduler; later runtimes do
            r#"{"process":{"scheduler":{"nice":"1"}}}"#,
        ] {
            assert_eq!(spec_error(text, false), None, "{text}");
        }
        assert_eq!(
            spec_error(r#"{"process":{"scheduler":{"nice":2147483648}}}"#, true).as_deref(),
            Some("process.scheduler.nice")
        );
        let exec = top(r#"{"args":["sh"],"Args":"sh","args":["sh"]}"#);
        let e = process_type_error(&exec, Target::Process, false).unwrap();
        assert_eq!(
            e.to_string(),
            "cannot decode string into `process.args` (array)"
        );
    }

    fn merged(text: &str) -> String {
        let t = top(text);
        let mut acc = Vec::new();
        for m in &t {
            match &m.node.value {
                Value::Null => clear(&mut acc),
                Value::Object(ms) => merge(&mut acc, ms, PROCESS, "process.rlimits").unwrap(),
                _ => panic!("not a process"),
            }
        }
        let mut out = Vec::new();
        write_obj(&mut out, text.as_bytes(), &acc);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn refused_values_survive_later_duplicates() {
        // Whichever runtime knows the field refuses the merge as it refuses
        // the original; one that does not know it skips it either way.
        assert_eq!(
            merged(r#"{"p":{"scheduler":{"nice":"1"}},"p":{"scheduler":{"nice":1}}}"#),
            r#"{"scheduler":{"nice":"1"}}"#
        );
        assert_eq!(
            merged(r#"{"p":{"cwd":5,"args":["a"]},"p":null,"p":{"cwd":"/","cwd":null}}"#),
            r#"{"cwd":5}"#
        );
        assert_eq!(
            merged(
                r#"{"p":{"ioPriority":{"class":"IOPRIO_CLASS_BE"}},"p":{"ioPriority":[]},"p":{"ioPriority":null}}"#
            ),
            r#"{"ioPriority":[]}"#
        );
    }

    #[test]
    fn scalar_lists_merge_element_by_element() {
        // A null element leaves what the earlier list had there; a longer
        // list reuses elements a shorter one left past its end.
        assert_eq!(
            merged(r#"{"p":{"args":["a", "b"]},"p":{"args":[null,"c"]}}"#),
            r#"{"args":["a","c"]}"#
        );
        assert_eq!(
            merged(
                r#"{"p":{"args":["a","b","c"]},"p":{"args":["x"]},"p":{"args":[null,null,null,null]}}"#
            ),
            r#"{"args":["x","b","c",""]}"#
        );
        // A single list is copied as written; [] starts afresh.
        assert_eq!(
            merged(r#"{"p":{"args":[ "a" , "b" ]}}"#),
            r#"{"args":[ "a" , "b" ]}"#
        );
        assert_eq!(
            merged(r#"{"p":{"args":["a"]},"p":{"args":[]},"p":{"args":[null]}}"#),
            r#"{"args":[""]}"#
        );
        assert_eq!(
            merged(
                r#"{"p":{"user":{"additionalGids":[1,2]}},"p":{"user":{"additionalGids":[null]}}}"#
            ),
            r#"{"user":{"additionalGids":[1]}}"#
        );
    }
}
