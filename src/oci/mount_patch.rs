//! Rewriting the options of a mount a tuning rule changes (the tmpfs
//! `/dev/shm` whose `size=` `tuning.shm_size` raises) in a config.json.
//!
//! Only the entry's `options` value is rebuilt; every other byte of the
//! file, of the `mounts` list and of the entry is copied as it was. An
//! entry is rewritten only where runc's decoder reads it from exactly one
//! place: one top-level key that folds to `mounts` (a repeated list is
//! merged element by element, spec.rs `GoSlice`), and at most one key of
//! the entry that folds to `options`. The container view marks such
//! entries `patchable` (core::container::Mount), so the decision never
//! shows an edit this module would not make.

use crate::core::decision::MountEdit;
use crate::core::tuning::shm::{self, TmpfsSize};
use crate::oci::gojson::{key_matches, Member, Node, Value};
use std::collections::BTreeMap;

/// The last string value of the keys of `obj` that fold to `field` (Go's
/// decoder: the last one wins); "" when none is a string.
fn last_string<'a>(obj: &'a [Member], field: &str) -> &'a str {
    obj.iter()
        .rev()
        .filter(|m| key_matches(&m.key, field))
        .find_map(|m| m.node.as_str())
        .unwrap_or("")
}

/// The strings of an `options` array (None: not an array of strings).
fn strings(n: &Node) -> Option<Vec<String>> {
    match &n.value {
        Value::Null => Some(Vec::new()),
        Value::Array(items) => items.iter().map(|i| i.as_str().map(String::from)).collect(),
        _ => None,
    }
}

/// The top-level member index of `mounts` and the list with the edits
/// made, or None when they change nothing (or the list is not one gpu-guard
/// rewrites).
pub fn edited(top: &[Member], edits: &BTreeMap<String, MountEdit>) -> Option<(usize, Node)> {
    if edits.is_empty() {
        return None;
    }
    let mut at = top
        .iter()
        .enumerate()
        .filter(|(_, m)| key_matches(&m.key, "mounts"));
    let (index, member) = at.next()?;
    if at.next().is_some() {
        return None;
    }
    let Value::Array(items) = &member.node.value else {
        return None;
    };
    let mut items = items.clone();
    let mut changed = false;
    for (dest, edit) in edits {
        changed |= edit_entry(&mut items, dest, edit);
    }
    changed.then(|| (index, Node::new(Value::Array(items))))
}

/// Sets the tmpfs size of the last entry mounted at `dest` (the one in
/// effect) to at least `edit.size`. Returns whether it changed.
fn edit_entry(items: &mut [Node], dest: &str, edit: &MountEdit) -> bool {
    let Some(entry) = items.iter_mut().rev().find(|n| {
        n.as_object()
            .is_some_and(|o| shm::clean_destination(last_string(o, "destination")) == dest)
    }) else {
        return false;
    };
    let Value::Object(members) = &mut entry.value else {
        return false;
    };
    if last_string(members, "type") != "tmpfs" {
        return false;
    }
    let mut opts = members
        .iter_mut()
        .filter(|m| key_matches(&m.key, "options"));
    let slot = opts.next();
    if opts.next().is_some() {
        return false;
    }
    let old = match &slot {
        Some(m) => match strings(&m.node) {
            Some(o) => o,
            None => return false,
        },
        None => Vec::new(),
    };
    if old.iter().any(|o| o == "bind" || o == "rbind") {
        return false;
    }
    // Never lowered: the spec may have changed since the decision.
    match shm::tmpfs_size(&old) {
        TmpfsSize::Unlimited => return false,
        TmpfsSize::Bytes(n) if n >= edit.size => return false,
        _ => {}
    }
    let new = Node::new(Value::Array(
        shm::with_size(&old, edit.size)
            .into_iter()
            .map(Node::string)
            .collect(),
    ));
    match slot {
        Some(m) => m.node = new,
        None => members.push(Member::new("options", new)),
    }
    entry.span = None;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::gojson;

    fn run(src: &str, size: u64) -> Option<String> {
        let root = gojson::parse(src.as_bytes()).unwrap();
        let top = root.as_object().unwrap();
        let edits = BTreeMap::from([("/dev/shm".to_string(), MountEdit { size })]);
        let (i, node) = edited(top, &edits)?;
        let mut out = Vec::new();
        out.push(b'{');
        for (k, m) in top.iter().enumerate() {
            if k > 0 {
                out.push(b',');
            }
            if k == i {
                gojson::write_string(&mut out, &m.key);
                out.push(b':');
                gojson::write(&mut out, src.as_bytes(), &node);
            } else {
                crate::oci::go_merge::write_member(&mut out, src.as_bytes(), m);
            }
        }
        out.push(b'}');
        Some(String::from_utf8(out).unwrap())
    }

    #[test]
    fn only_the_options_of_the_entry_in_effect_change() {
        let src = r#"{"mounts": [{"destination": "/proc", "type": "proc",  "source": "proc"},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "size=1m"]},
            {"destination": "/dev/shm/", "type": "tmpfs", "source": "shm", "options": ["nosuid","noexec", "size=65536k", "mode=1777"], "x-extra": [1, 2]}],
            "process": {"env": []}}"#;
        let out = run(src, 1 << 30).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["mounts"][2]["options"],
            serde_json::json!(["nosuid", "noexec", "size=1048576k", "mode=1777"])
        );
        assert_eq!(v["mounts"][2]["x-extra"], serde_json::json!([1, 2]));
        assert_eq!(
            v["mounts"][1]["options"],
            serde_json::json!(["nosuid", "size=1m"])
        );
        // Untouched entries keep their bytes, spacing included.
        assert!(out.contains(r#"{"destination": "/proc", "type": "proc",  "source": "proc"}"#));
        // No options key: one is added.
        let src = r#"{"mounts": [{"destination": "/dev/shm", "type": "tmpfs", "source": "shm"}]}"#;
        let v: serde_json::Value = serde_json::from_str(&run(src, 1 << 30).unwrap()).unwrap();
        assert_eq!(
            v["mounts"][0]["options"],
            serde_json::json!(["size=1048576k"])
        );
    }

    #[test]
    fn what_is_not_rewritten() {
        // Already large enough, unlimited, a bind mount, not tmpfs.
        for src in [
            r#"{"mounts": [{"destination": "/dev/shm", "type": "tmpfs", "options": ["size=2g"]}]}"#,
            r#"{"mounts": [{"destination": "/dev/shm", "type": "tmpfs", "options": ["size=0"]}]}"#,
            r#"{"mounts": [{"destination": "/dev/shm", "type": "tmpfs", "options": ["rbind"]}]}"#,
            r#"{"mounts": [{"destination": "/dev/shm", "type": "bind", "options": ["rbind"]}]}"#,
            // Repeated lists, repeated options keys, options not strings.
            r#"{"mounts": [{"destination": "/dev/shm", "type": "tmpfs"}], "Mounts": []}"#,
            r#"{"mounts": [{"destination": "/dev/shm", "type": "tmpfs", "options": [], "OPTIONS": []}]}"#,
            r#"{"mounts": [{"destination": "/dev/shm", "type": "tmpfs", "options": [1]}]}"#,
            r#"{"mounts": {"destination": "/dev/shm"}}"#,
            r#"{"process": {}}"#,
        ] {
            assert_eq!(run(src, 1 << 30), None, "{src}");
        }
    }
}
