//! Reading a bundle's config.json (or exec's process.json) and writing
//! gpu-guard's edits back so that runc reads them.
//!
//! The file is read by [`gojson`] into a tree that keeps every member and
//! the bytes each value came from, and viewed as runc's Go decoder sees it
//! ([`SpecView`]). An edit rewrites only the `process` object: every key
//! that folds to `process` (duplicates, case variants) is merged into one
//! canonical `"process"` member the way Go merges them, and within it the
//! three fields gpu-guard edits (`env`, `capabilities`, `noNewPrivileges`)
//! are written under their canonical names with the values runc would have
//! read plus the edits, every case variant and duplicate of them removed.
//! So Go (last key wins), yajl-based readers such as crun (first key wins)
//! and serde (last key wins) all read the edited values. Everything else is
//! copied byte for byte; the file is replaced atomically or not at all.
//!
//! The schema of that merge, and Go's type rules, are in [`go_merge`]. A
//! file whose process runc's decoder refuses (a type error, even in a value
//! a later duplicate replaces: Go reports it after decoding the rest) is
//! never rewritten: it is passed through unchanged, so runc reports its own
//! error instead of starting what the merge would have repaired.
//!
//! A merge that cannot be reproduced (a list of structs holding something
//! other than objects, which runc refuses anyway) is an error: the caller
//! refuses a GPU container rather than start it without its edits.

use crate::core::capability;
use crate::core::container::{Capabilities, Container};
use crate::core::decision::Edits;
pub use crate::oci::go_merge::TypeError;
use crate::oci::go_merge::{self, Out, OutMember, Target, PROCESS};
use crate::oci::gojson::{self, key_matches, Member, Node, Tree, Value};
use crate::oci::spec::{ProcessView, SpecError, SpecView};
use crate::oci::{cpuset_patch, mount_patch};
use crate::sys::fsutil;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest spec file parsed. runc reads any size; engines write tens of
/// KiB. Up to 1 GiB is parsed (the tree takes about twice the file); a
/// larger file is only scanned, in bounded memory, for GPU requests
/// ([`file_mentions_gpu`]).
pub const MAX_SPEC_BYTES: u64 = 1 << 30;

#[derive(Debug, thiserror::Error)]
pub enum SpecFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: gojson::Error,
    },
    #[error("{path}: {source}")]
    Shape {
        path: PathBuf,
        #[source]
        source: SpecError,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A loaded spec: its bytes and tree (to patch), runc's view and the
/// container view (to decide on).
pub struct LoadedSpec {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    pub root: Tree,
    pub view: SpecView,
    pub container: Container,
}

impl LoadedSpec {
    /// Parses config.json bytes; `bundle` resolves a relative root.path.
    pub fn from_bytes(
        path: &Path,
        bytes: Vec<u8>,
        bundle: Option<&Path>,
    ) -> Result<LoadedSpec, SpecFileError> {
        Self::parse(path, bytes, bundle).map_err(|(e, _)| e)
    }

    /// [`LoadedSpec::from_bytes`], handing the bytes back on error.
    pub fn parse(
        path: &Path,
        bytes: Vec<u8>,
        bundle: Option<&Path>,
    ) -> Result<LoadedSpec, (SpecFileError, Vec<u8>)> {
        let root = match gojson::parse(&bytes) {
            Ok(r) => r,
            Err(source) => {
                let e = SpecFileError::Parse {
                    path: path.to_path_buf(),
                    source,
                };
                return Err((e, bytes));
            }
        };
        let view = match SpecView::from_node(&root) {
            Ok(v) => v,
            Err(source) => {
                gojson::drop_deep(root);
                let e = SpecFileError::Shape {
                    path: path.to_path_buf(),
                    source,
                };
                return Err((e, bytes));
            }
        };
        let container = view.container(bundle);
        Ok(LoadedSpec {
            path: path.to_path_buf(),
            bytes,
            root: Tree(root),
            view,
            container,
        })
    }

    /// The file with the edits applied; None when they change nothing.
    pub fn patched(&self, edits: &Edits) -> Result<Option<Vec<u8>>, PatchError> {
        let Some(process) = &self.view.process else {
            // No process: runc refuses such a spec for create/run.
            return Ok(None);
        };
        patch(&self.bytes, &self.root.0, process, edits, Target::Spec)
    }

    /// The first value in the spec's `process` objects that runc's decoder
    /// (runtime-spec `Process` as runc 1.1 builds it) cannot store: runc
    /// refuses such a spec, and [`LoadedSpec::patched`] leaves it as it is.
    pub fn runc_type_error(&self) -> Option<TypeError> {
        go_merge::process_type_error(self.root.0.as_object()?, Target::Spec, false)
    }
}

/// Reads and parses a config.json; `bundle` resolves a relative root.path.
pub fn load(path: &Path, bundle: Option<&Path>) -> Result<LoadedSpec, SpecFileError> {
    let bytes =
        fsutil::read_limited(path, MAX_SPEC_BYTES).map_err(|source| SpecFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    LoadedSpec::from_bytes(path, bytes, bundle)
}

/// An exec `--process` file: bytes, tree and runc's view of it.
pub struct LoadedProcess {
    pub bytes: Vec<u8>,
    pub root: Tree,
    pub view: ProcessView,
}

impl LoadedProcess {
    pub fn from_bytes(bytes: Vec<u8>) -> Result<LoadedProcess, String> {
        let root = gojson::parse(&bytes).map_err(|e| e.to_string())?;
        match ProcessView::from_node(&root) {
            Ok(view) => Ok(LoadedProcess {
                bytes,
                root: Tree(root),
                view,
            }),
            Err(e) => {
                gojson::drop_deep(root);
                Err(e.to_string())
            }
        }
    }

    pub fn patched(&self, edits: &Edits) -> Result<Option<Vec<u8>>, PatchError> {
        patch(
            &self.bytes,
            &self.root.0,
            &self.view,
            edits,
            Target::Process,
        )
    }

    /// [`LoadedSpec::runc_type_error`] for an exec process file.
    pub fn runc_type_error(&self) -> Option<TypeError> {
        go_merge::process_type_error(self.root.0.as_object()?, Target::Process, false)
    }
}

/// What a byte scan finds when a spec cannot be read: does the file name a
/// GPU request or NVIDIA's tooling? Any spelling of `nvidia` (the variable
/// NVIDIA_VISIBLE_DEVICES, CDI kinds `nvidia.com/`, `/dev/nvidia*`, NVIDIA's
/// hooks and its volume-mounts directory), or a `\u` escape of an ASCII
/// letter or digit, which no encoder writes and which would hide a name
/// from this scan.
pub fn mentions_gpu(bytes: &[u8]) -> bool {
    const WORD: &[u8] = b"nvidia";
    let ci = bytes
        .windows(WORD.len())
        .any(|w| w.eq_ignore_ascii_case(WORD));
    ci || bytes.windows(6).any(|w| {
        w[0] == b'\\'
            && w[1] == b'u'
            && std::str::from_utf8(&w[2..])
                .ok()
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .and_then(char::from_u32)
                .is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// [`mentions_gpu`] over a file of any size, read in chunks.
pub fn file_mentions_gpu(path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: a FIFO must not block us; only regular files are read.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Ok(false);
    }
    let mut buf = vec![0u8; 1 << 20];
    let keep = 8;
    let mut have = 0;
    loop {
        let n = f.read(&mut buf[have..])?;
        if n == 0 {
            return Ok(mentions_gpu(&buf[..have]));
        }
        have += n;
        if mentions_gpu(&buf[..have]) {
            return Ok(true);
        }
        if have > keep {
            buf.copy_within(have - keep..have, 0);
            have = keep;
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("`{0}` holds a value that is not an object; runc refuses such a spec, and gpu-guard cannot edit it safely")]
    Unmergeable(&'static str),
}

impl From<go_merge::Unmergeable> for PatchError {
    fn from(e: go_merge::Unmergeable) -> PatchError {
        PatchError::Unmergeable(e.0)
    }
}

/// A decoded rlimit entry as [`raised_rlimits`] edits it.
struct Rlimit {
    kind: String,
    soft: u64,
    hard: u64,
}

/// Raises rlimit type `kind` to at least `want` on the entry runc applies:
/// runc sets every entry in order (runc utils_linux.go newProcess keeps the
/// spec's order; libcontainer/init_linux.go setupRlimits calls prlimit for
/// each), so the last entry of a type is the one in force and the earlier
/// ones are overridden by it. Without an entry of that type, one is added.
/// The entry keeps its soft or hard value where that is higher (the
/// decision never lowers a limit, and the spec may have changed since).
/// Returns whether anything changed.
fn raise(list: &mut Vec<Rlimit>, kind: &str, want: &crate::core::decision::Rlimit) -> bool {
    match list.iter_mut().rev().find(|r| r.kind == kind) {
        Some(r) if r.soft >= want.soft && r.hard >= want.hard => false,
        Some(r) => {
            r.soft = r.soft.max(want.soft);
            r.hard = r.hard.max(want.hard);
            true
        }
        None => {
            list.push(Rlimit {
                kind: kind.to_string(),
                soft: want.soft,
                hard: want.hard,
            });
            true
        }
    }
}

/// `process.rlimits` with each limit of the edits raised ([`raise`]), or
/// None when runc would already set every one at least as high. The other
/// entries are kept as runc would read them.
fn raised_rlimits(process: &ProcessView, edits: &Edits) -> Option<Node> {
    if edits.rlimits.is_empty() {
        return None;
    }
    let mut list: Vec<Rlimit> = process
        .rlimits
        .as_ref()
        .map(|r| {
            r.items()
                .iter()
                .map(|r| Rlimit {
                    kind: r.kind.clone(),
                    soft: r.soft,
                    hard: r.hard,
                })
                .collect()
        })
        .unwrap_or_default();
    let mut changed = false;
    for (kind, want) in &edits.rlimits {
        changed |= raise(&mut list, kind, want);
    }
    let number = |n: u64| Node::new(Value::Number(n.to_string()));
    changed.then(|| {
        Node::new(Value::Array(
            list.into_iter()
                .map(|r| {
                    Node::new(Value::Object(vec![
                        Member::new("type", Node::string(r.kind)),
                        Member::new("hard", number(r.hard)),
                        Member::new("soft", number(r.soft)),
                    ]))
                })
                .collect(),
        ))
    })
}

fn string_array<'a>(items: impl IntoIterator<Item = &'a String>) -> Node {
    Node::new(Value::Array(
        items.into_iter().map(|s| Node::string(s.clone())).collect(),
    ))
}

/// True when `cap` is one of the edits' dropped capabilities.
fn dropped(edits: &Edits, cap: &str) -> bool {
    let norm = capability::normalize(cap).unwrap_or_else(|| cap.to_string());
    edits
        .capabilities_dropped
        .iter()
        .any(|d| *d == norm || d == cap)
}

/// The patched file, or None when the edits change nothing runc reads, or
/// when runc refuses the process as it is: such a file is passed through
/// unchanged, so runc reports its own error (a merge would drop a type
/// error in a value a later duplicate replaces, and make it startable).
fn patch(
    src: &[u8],
    root: &Node,
    process: &ProcessView,
    edits: &Edits,
    target: Target,
) -> Result<Option<Vec<u8>>, PatchError> {
    let caps = process.capabilities.as_ref().map(|c| c.to_capabilities());
    let drops = caps.as_ref().is_some_and(|c| {
        Capabilities::SETS
            .iter()
            .filter_map(|s| c.set(s))
            .flatten()
            .any(|cap| dropped(edits, cap))
    });
    let nnp = edits.no_new_privileges && !process.no_new_privileges;
    let rlimits = raised_rlimits(process, edits);
    let Some(top) = root.as_object() else {
        return Ok(None);
    };
    // Top-level members replaced whole: the edited `mounts` list and the
    // `linux` object with its cpuset (mount_patch, cpuset_patch).
    let replaced: Vec<(usize, Node)> = match target {
        Target::Spec => mount_patch::edited(top, &edits.mounts)
            .into_iter()
            .chain(cpuset_patch::edited(top, edits.cpuset.as_ref()))
            .collect(),
        Target::Process => Vec::new(),
    };
    let process_edited = !edits.env.is_empty() || drops || nnp || rlimits.is_some();
    if !process_edited && replaced.is_empty() {
        return Ok(None);
    }
    if go_merge::process_type_error(top, target, false).is_some() {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(src.len() + 256);
    if !process_edited {
        // Only a mount or the cpuset changes: the process objects keep their bytes.
        write_spec(&mut out, src, top, None, &replaced);
        return Ok(Some(out));
    }
    let Some(mut acc) = merged_process(top, target)? else {
        return Ok(None);
    };
    set_edited(&mut acc, process, caps.as_ref(), rlimits, edits);
    match target {
        Target::Process => go_merge::write_obj(&mut out, src, &acc),
        Target::Spec => write_spec(&mut out, src, top, Some(&acc), &replaced),
    }
    Ok(Some(out))
}

/// Every `process` merged into one, as Go decodes them; None when the
/// top-level `process` is not an object (runc refuses it; the view says so
/// first).
fn merged_process(
    top: &[Member],
    target: Target,
) -> Result<Option<Vec<OutMember<'_>>>, PatchError> {
    let mut acc: Vec<OutMember> = Vec::new();
    match target {
        Target::Process => go_merge::merge(&mut acc, top, PROCESS, "rlimits")?,
        Target::Spec => {
            for m in top.iter().filter(|m| key_matches(&m.key, "process")) {
                match &m.node.value {
                    Value::Null => go_merge::clear(&mut acc),
                    Value::Object(members) => {
                        go_merge::merge(&mut acc, members, PROCESS, "process.rlimits")?
                    }
                    _ => return Ok(None),
                }
            }
        }
    }
    Ok(Some(acc))
}

/// The edited fields: exactly what runc would read, plus the edits.
fn set_edited<'a>(
    acc: &mut Vec<OutMember<'a>>,
    process: &ProcessView,
    caps: Option<&Capabilities>,
    rlimits: Option<Node>,
    edits: &Edits,
) {
    let mut env = process.env_entries();
    for (k, v) in &edits.env {
        env.push(format!("{k}={}", v.as_str().unwrap_or_default()));
    }
    if process.env.is_some() || !edits.env.is_empty() {
        go_merge::set(acc, "env", Out::Built(string_array(&env)));
    }
    if let Some(c) = caps {
        let sets = Capabilities::SETS
            .iter()
            .zip(go_merge::CAPS)
            .filter_map(|(s, field)| {
                let list: Vec<&String> = c
                    .set(s)?
                    .iter()
                    .filter(|cap| !dropped(edits, cap))
                    .collect();
                Some(Member::new(field.name, string_array(list)))
            })
            .collect();
        go_merge::set(
            acc,
            "capabilities",
            Out::Built(Node::new(Value::Object(sets))),
        );
    }
    if let Some(list) = rlimits {
        go_merge::set(acc, "rlimits", Out::Built(list));
    }
    let nnp = process.no_new_privileges || edits.no_new_privileges;
    go_merge::set(
        acc,
        "noNewPrivileges",
        Out::Built(Node::new(Value::Bool(nnp))),
    );
}

/// Writes config.json: every top-level member as it was, the merged
/// process (when given) in place of the first `process` and none of the
/// others, and each replaced member (the edited `mounts` list, the
/// `linux` object) in place of the one at its index.
fn write_spec(
    out: &mut Vec<u8>,
    src: &[u8],
    top: &[Member],
    process: Option<&[OutMember]>,
    replaced: &[(usize, Node)],
) {
    out.push(b'{');
    let mut first = true;
    let mut process_written = false;
    for (i, m) in top.iter().enumerate() {
        let is_process = process.is_some() && key_matches(&m.key, "process");
        if is_process && process_written {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        let replacement = replaced.iter().find(|(at, _)| *at == i).map(|(_, n)| n);
        match (process, replacement) {
            (Some(p), _) if is_process => {
                process_written = true;
                out.extend_from_slice(b"\"process\":");
                go_merge::write_obj(out, src, p);
            }
            (_, Some(node)) => {
                match &m.key_span {
                    Some(span) => out.extend_from_slice(&src[span.clone()]),
                    None => gojson::write_string(out, &m.key),
                }
                out.push(b':');
                gojson::write(out, src, node);
            }
            _ => go_merge::write_member(out, src, m),
        }
    }
    out.push(b'}');
}

/// Atomically replaces the spec file with `bytes`.
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), SpecFileError> {
    fsutil::replace_file(path, bytes, 0o600).map_err(|source| SpecFileError::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn edits() -> Edits {
        let mut e = Edits::default();
        e.env
            .insert("CUDA_DEVICE_ORDER".into(), json!("PCI_BUS_ID"));
        e.capabilities_dropped = vec!["CAP_NET_RAW".into()];
        e.no_new_privileges = true;
        e
    }

    fn patched(src: &str, e: &Edits) -> Option<String> {
        let l = LoadedSpec::from_bytes(Path::new("c"), src.as_bytes().to_vec(), None).unwrap();
        l.patched(e).unwrap().map(|b| String::from_utf8(b).unwrap())
    }

    fn reread(text: &str) -> Container {
        LoadedSpec::from_bytes(Path::new("c"), text.as_bytes().to_vec(), None)
            .unwrap()
            .container
            .clone()
    }

    #[test]
    fn patches_and_keeps_unknown_fields_in_order() {
        let src = r#"{"ociVersion": "1.0.2", "zzz": {"keep": [1, 2e999]},
            "process": {"user": {"uid": 0}, "env": ["PATH=/bin"],
              "capabilities": {"bounding": ["CAP_CHOWN", "CAP_NET_RAW"], "effective": ["CAP_NET_RAW"], "ambient": []},
              "futureField": true}, "aaa": 1}"#;
        let out = patched(src, &edits()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out.replace("2e999", "2")).unwrap();
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, vec!["ociVersion", "zzz", "process", "aaa"]);
        assert!(out.contains(r#""zzz":{"keep": [1, 2e999]}"#), "{out}");
        let p = &v["process"];
        assert_eq!(
            p["env"],
            json!(["PATH=/bin", "CUDA_DEVICE_ORDER=PCI_BUS_ID"])
        );
        assert_eq!(p["capabilities"]["bounding"], json!(["CAP_CHOWN"]));
        assert_eq!(p["capabilities"]["effective"], json!([]));
        assert_eq!(p["capabilities"]["ambient"], json!([]));
        assert_eq!(p["capabilities"].get("inheritable"), None);
        assert_eq!(p["noNewPrivileges"], json!(true));
        assert_eq!(p["futureField"], json!(true));
        assert_eq!(p["user"], json!({"uid": 0}));
        // nothing to change: no rewrite
        assert_eq!(patched(src, &Edits::default()), None);
    }

    #[test]
    fn edits_win_over_case_variants_and_duplicates() {
        let src = r#"{"process": {"args": ["sh"], "noNewPrivileges": true, "env": ["A=1"],
              "capabilities": {"bounding": ["CAP_CHOWN"]}},
            "Process": {"NoNewPrivileges": false, "Env": ["NVIDIA_VISIBLE_DEVICES=all"],
              "Capabilities": {"Bounding": ["CAP_SYS_ADMIN", "CAP_NET_RAW"]}, "cwd": "/"}}"#;
        let before = reread(src);
        assert!(!before.no_new_privileges);
        assert_eq!(before.env.get("NVIDIA_VISIBLE_DEVICES"), Some("all"));
        let out = patched(src, &edits()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 1, "{out}");
        let p = &v["process"];
        assert_eq!(p["args"], json!(["sh"]));
        assert_eq!(p["cwd"], json!("/"));
        assert_eq!(p["noNewPrivileges"], json!(true));
        assert_eq!(p["capabilities"], json!({"bounding": ["CAP_SYS_ADMIN"]}));
        assert_eq!(
            p["env"],
            json!(["NVIDIA_VISIBLE_DEVICES=all", "CUDA_DEVICE_ORDER=PCI_BUS_ID"])
        );
        let after = reread(&out);
        assert!(after.no_new_privileges);
    }

    #[test]
    fn lists_of_structs_merge_as_go_merges_them() {
        // Element 0 of the second list decodes into element 0 of the first;
        // the third, longer list reuses element 1 the second left behind.
        let src = r#"{"process": {"rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1, "soft": 1}, {"type": "RLIMIT_NPROC", "hard": 5, "soft": 5}]},
                      "process": {"rlimits": [{"hard": 2}], "noNewPrivileges": false},
                      "Process": {"Rlimits": [{"soft": 3}, {"soft": 4}]}}"#;
        let out = patched(src, &edits()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["process"]["rlimits"],
            json!([{"type": "RLIMIT_NOFILE", "hard": 2, "soft": 3}, {"type": "RLIMIT_NPROC", "hard": 5, "soft": 4}])
        );
        let src = r#"{"process": {"rlimits": [{"hard": 1}]}, "process": {"rlimits": []}, "process": {"rlimits": [{"soft": 2}]}}"#;
        let v: serde_json::Value = serde_json::from_str(&patched(src, &edits()).unwrap()).unwrap();
        assert_eq!(v["process"]["rlimits"], json!([{"soft": 2}]));
        // An element that is not an object: Go fails to decode it, runc
        // refuses the spec, and so the view is an error too.
        let src = r#"{"process": {"rlimits": [1]}, "process": {"rlimits": [{"soft": 2}]}}"#;
        assert!(LoadedSpec::from_bytes(Path::new("c"), src.as_bytes().to_vec(), None).is_err());
    }

    #[test]
    fn rlimits_raise_the_entry_runc_applies() {
        use crate::core::decision::Rlimit;
        // runc applies every entry in order, so the last of a type is in
        // force: that one is raised, whatever the earlier ones say.
        let src = r#"{"process": {"rlimits": [
            {"type": "RLIMIT_MEMLOCK", "hard": 65536, "soft": 65536},
            {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024},
            {"type": "RLIMIT_MEMLOCK", "hard": 65536, "soft": 65536}]}}"#;
        let want = Rlimit {
            soft: 1 << 30,
            hard: 1 << 30,
        };
        let mut edits = Edits::default();
        edits.rlimits.insert("RLIMIT_MEMLOCK".into(), want);
        // Any type the decision raises is handled alike (RLIMIT_STACK).
        edits.rlimits.insert("RLIMIT_STACK".into(), want);
        let out = patched(src, &edits).expect("raised");
        let again = reread(&out);
        assert_eq!(again.rlimits["RLIMIT_MEMLOCK"], want, "{out}");
        assert_eq!(again.rlimits["RLIMIT_STACK"], want, "{out}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["process"]["rlimits"][0],
            json!({"type": "RLIMIT_MEMLOCK", "hard": 65536, "soft": 65536})
        );
        assert_eq!(patched(&out, &edits), None);
        // The last entry already high enough: nothing to raise, even though
        // an earlier, overridden one is lower.
        let src = r#"{"process": {"rlimits": [
            {"type": "RLIMIT_MEMLOCK", "hard": 1, "soft": 1},
            {"type": "RLIMIT_MEMLOCK", "hard": 2147483648, "soft": 2147483648}]}}"#;
        let mut edits = Edits::default();
        edits.rlimits.insert("RLIMIT_MEMLOCK".into(), want);
        assert_eq!(patched(src, &edits), None);
    }

    #[test]
    fn shm_size_is_written_with_or_without_process_edits() {
        use crate::core::decision::MountEdit;
        let src = r#"{"process": {"env": ["A=1"], "Env": ["B=2"]},
            "mounts": [{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "size=65536k"]}]}"#;
        let mut e = Edits::default();
        e.mounts
            .insert("/dev/shm".into(), MountEdit { size: 1 << 30 });
        let out = patched(src, &e).unwrap();
        // The process keeps its bytes (both keys) when only a mount changes.
        assert!(out.contains(r#"{"env": ["A=1"], "Env": ["B=2"]}"#), "{out}");
        let again = reread(&out);
        assert_eq!(again.mounts[0].options, vec!["nosuid", "size=1048576k"]);
        assert_eq!(again.env.get("B"), Some("2"));
        e.env.insert("C".into(), json!("3"));
        let out = patched(src, &e).unwrap();
        let again = reread(&out);
        assert_eq!(again.mounts[0].options, vec!["nosuid", "size=1048576k"]);
        assert_eq!(again.env.get("C"), Some("3"));
        // Already large enough: nothing to write.
        let big = src.replace("65536k", "2g");
        e.env.clear();
        assert_eq!(patched(&big, &e), None);
    }

    #[test]
    fn a_spec_runc_refuses_is_left_as_it_is() {
        // Go reports the type error of the first `process` although the
        // second replaces the field: runc refuses the spec. Merging would
        // drop the error and make it startable, so it is not rewritten.
        for src in [
            r#"{"process": {"cwd": 5, "env": ["A=1"]}, "process": {"cwd": "/"}}"#,
            r#"{"process": {"user": {"gid": "0"}, "user": {"gid": 0}, "env": []}}"#,
            r#"{"process": {"args": 5}, "process": null, "process": {"args": ["sh"]}}"#,
            r#"{"process": {"consoleSize": {"height": -1}}, "Process": {"consoleSize": null}}"#,
        ] {
            let l = LoadedSpec::from_bytes(Path::new("c"), src.as_bytes().to_vec(), None).unwrap();
            assert!(l.runc_type_error().is_some(), "{src}");
            assert_eq!(l.patched(&edits()).unwrap(), None, "{src}");
        }
        let p = LoadedProcess::from_bytes(br#"{"cwd": 5, "cwd": "/", "args": ["sh"]}"#.to_vec())
            .unwrap();
        assert_eq!(
            p.runc_type_error().map(|e| e.field).as_deref(),
            Some("process.cwd")
        );
        assert_eq!(p.patched(&edits()).unwrap(), None);
        // A field runc 1.1 does not know: edited, the error kept for the
        // runtimes that know it.
        let src = r#"{"process": {"scheduler": {"nice": "x"}, "env": []}, "process": {"scheduler": {"nice": 1}}}"#;
        let out = patched(src, &edits()).expect("edited");
        assert!(out.contains(r#""scheduler":{"nice": "x"}"#), "{out}");
        assert!(reread(&out).no_new_privileges);
    }

    #[test]
    fn gpu_mentions() {
        assert!(mentions_gpu(b"{\"env\":[\"NVIDIA_VISIBLE_DEVICES=all\"]"));
        assert!(mentions_gpu(b"/dev/Nvidia0"));
        assert!(mentions_gpu(b"\"\\u004eVIDIA\""));
        assert!(!mentions_gpu(b"{\"env\":[\"A=\\u00e9\"]}"));
        assert!(!mentions_gpu(b"{\"process\":{}}"));
    }

    #[test]
    fn rlimits_are_raised_never_lowered() {
        use crate::core::decision::Rlimit;
        let src = r#"{"process": {"rlimits": [
            {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024},
            {"type": "RLIMIT_MEMLOCK", "hard": 1099511627776, "soft": 65536}]}}"#;
        let mut edits = Edits::default();
        edits.rlimits.insert(
            "RLIMIT_MEMLOCK".into(),
            Rlimit {
                soft: 1 << 30,
                hard: 1 << 30,
            },
        );
        let out = patched(src, &edits).expect("raised");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["process"]["rlimits"],
            json!([
                {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024},
                {"type": "RLIMIT_MEMLOCK", "hard": 1099511627776u64, "soft": 1073741824}
            ])
        );
        // Again: nothing left to raise, so nothing is rewritten.
        assert_eq!(patched(&out, &edits), None);
        // A duplicate `process` merged as runc reads it, then raised; and
        // the result reads back with the raised limit.
        let dup = r#"{"process": {"rlimits": [{"type": "RLIMIT_MEMLOCK", "hard": 1, "soft": 1}]},
                      "process": {"env": []}}"#;
        let out = patched(dup, &edits).expect("raised");
        assert_eq!(
            reread(&out).rlimits["RLIMIT_MEMLOCK"],
            Rlimit {
                soft: 1 << 30,
                hard: 1 << 30
            }
        );
        // No rlimits at all: added, unlimited as u64::MAX.
        edits.rlimits.insert(
            "RLIMIT_MEMLOCK".into(),
            Rlimit {
                soft: u64::MAX,
                hard: u64::MAX,
            },
        );
        let out = patched(r#"{"process": {"env": []}}"#, &edits).expect("added");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["process"]["rlimits"],
            json!([{"type": "RLIMIT_MEMLOCK", "hard": u64::MAX, "soft": u64::MAX}])
        );
    }
}
