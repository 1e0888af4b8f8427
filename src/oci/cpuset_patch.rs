//! Setting `linux.resources.cpu.cpus` and `.mems` in a config.json
//! (`tuning.numa = "pin"`, core::tuning::numa): runc writes them to the
//! container cgroup's cpuset (libcontainer/cgroups/fs/cpuset.go), so the
//! container's CPUs and memory are its GPUs' NUMA node.
//!
//! Only the `linux` member is rebuilt: inside it, `resources` and `cpu` are
//! created where absent (or null) and `cpus`/`mems` set; every other
//! member, of the file and of those objects, keeps its bytes. The edit is
//! made only where runc reads each of these from one key (the container
//! view's `Cpuset::patchable`), and the decision makes it only for a
//! container with no cpuset of its own, so nothing set is overridden.

use crate::core::decision::CpusetEdit;
use crate::oci::gojson::{key_matches, Member, Node, Value};

/// The member `field` of `obj` as an object to edit: the one key that
/// folds to it (None: two or more, or not an object nor null), created
/// when absent.
fn child<'a>(obj: &'a mut Vec<Member>, field: &str) -> Option<&'a mut Vec<Member>> {
    let mut at = obj
        .iter()
        .enumerate()
        .filter(|(_, m)| key_matches(&m.key, field))
        .map(|(i, _)| i);
    let i = match (at.next(), at.next()) {
        (None, _) => {
            obj.push(Member::new(field, Node::new(Value::Object(Vec::new()))));
            obj.len() - 1
        }
        (Some(i), None) => i,
        (Some(_), Some(_)) => return None,
    };
    let node = &mut obj[i].node;
    if matches!(node.value, Value::Null) {
        node.value = Value::Object(Vec::new());
    }
    // Rebuilt: written fresh, its untouched members still from their bytes.
    node.span = None;
    match &mut node.value {
        Value::Object(members) => Some(members),
        _ => None,
    }
}

/// Sets the string member `field` (the one key that folds to it).
fn set_string(obj: &mut Vec<Member>, field: &str, value: &str) -> Option<()> {
    let mut at = obj.iter().filter(|m| key_matches(&m.key, field));
    if at.next().is_some() && at.next().is_some() {
        return None;
    }
    match obj.iter_mut().find(|m| key_matches(&m.key, field)) {
        Some(m) => m.node = Node::string(value),
        None => obj.push(Member::new(field, Node::string(value))),
    }
    Some(())
}

/// The top-level member index of `linux` and its value with the cpuset
/// set, or None when there is no edit or the spec is not one runc reads
/// from single keys.
pub fn edited(top: &[Member], edit: Option<&CpusetEdit>) -> Option<(usize, Node)> {
    let edit = edit?;
    let mut at = top
        .iter()
        .enumerate()
        .filter(|(_, m)| key_matches(&m.key, "linux"));
    let (index, member) = at.next()?;
    if at.next().is_some() {
        return None;
    }
    let mut linux = member.node.clone();
    linux.span = None;
    let Value::Object(members) = &mut linux.value else {
        return None;
    };
    let cpu = child(child(members, "resources")?, "cpu")?;
    set_string(cpu, "cpus", &edit.cpus)?;
    set_string(cpu, "mems", &edit.mems)?;
    Some((index, linux))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::gojson;

    fn run(src: &str) -> Option<serde_json::Value> {
        let tree = gojson::parse(src.as_bytes()).unwrap();
        let top = tree.as_object().unwrap();
        let edit = CpusetEdit {
            cpus: "0-15,32-47".into(),
            mems: "0".into(),
        };
        let (i, node) = edited(top, Some(&edit))?;
        assert!(key_matches(&top[i].key, "linux"));
        let mut out = Vec::new();
        gojson::write(&mut out, src.as_bytes(), &node);
        Some(serde_json::from_slice(&out).unwrap())
    }

    #[test]
    fn sets_the_cpuset_keeping_everything_else() {
        let v = run(r#"{"linux": {"namespaces": [{"type": "pid"}], "resources": {"memory": {"limit": 5}}}}"#).unwrap();
        assert_eq!(v["namespaces"][0]["type"], "pid");
        assert_eq!(v["resources"]["memory"]["limit"], 5);
        assert_eq!(v["resources"]["cpu"]["cpus"], "0-15,32-47");
        assert_eq!(v["resources"]["cpu"]["mems"], "0");
        let v = run(r#"{"linux": {"resources": null}}"#).unwrap();
        assert_eq!(v["resources"]["cpu"]["mems"], "0");
        let v = run(r#"{"linux": {"resources": {"cpu": {"shares": 2, "cpus": ""}}}}"#).unwrap();
        assert_eq!(v["resources"]["cpu"]["shares"], 2);
        assert_eq!(v["resources"]["cpu"]["cpus"], "0-15,32-47");
        let v = run(r#"{"linux": {}}"#).unwrap();
        assert_eq!(v["resources"]["cpu"]["cpus"], "0-15,32-47");
    }

    #[test]
    fn ambiguous_specs_are_left_alone() {
        assert_eq!(run(r#"{"process": {}}"#), None);
        assert_eq!(run(r#"{"linux": {}, "Linux": {}}"#), None);
        assert_eq!(
            run(r#"{"linux": {"resources": {}, "resources": {}}}"#),
            None
        );
        assert_eq!(
            run(r#"{"linux": {"resources": {"cpu": {"cpus": "", "CPUS": ""}}}}"#),
            None
        );
        assert_eq!(run(r#"{"linux": {"resources": 3}}"#), None);
        assert_eq!(run(r#"{"linux": null}"#), None);
    }
}
