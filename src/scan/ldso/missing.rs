//! The findings of one judged program: every request the loader could
//! not satisfy (not found, refused, or not judged), with the chain of
//! objects that led to it, whether only an optional path takes it, and
//! where the image has the file instead (super::resolve).

use super::loader::{Outcome, Session};
use super::resolve::{file_name, not_judged, StartEnv, MAX_MISSING};
use super::snapshot::{Idx, Snapshot};
use crate::core::dlopen_libs::{Rule, RULES};
use crate::core::driver_libs::{self, Capability};
use crate::core::libraries::{LibraryScan, Missing, RequestKind};
use std::collections::{BTreeSet, HashMap, HashSet};

/// What the findings of every session are written with: the image's
/// libraries by name, the container's start and its driver capabilities.
pub(super) type MissingCtx<'a> = (
    &'a HashMap<&'a str, Idx>,
    &'a StartEnv,
    &'a BTreeSet<Capability>,
);

/// The missing libraries of one judged session.
pub(super) fn collect_missing(
    s: &Session,
    snap: &Snapshot,
    (by_name, inputs, caps): MissingCtx,
    seen: &mut HashSet<(String, String)>,
    scan: &mut LibraryScan,
) {
    let ctx = Ctx::new(s, snap);
    for e in &s.edges[s.edges_before_root..] {
        let (error, unjudged) = match &e.outcome {
            Outcome::Found(_) => continue,
            Outcome::NotFound { other_class: true } => (
                Some("wrong ELF class (a library of another class or machine)".to_string()),
                None,
            ),
            Outcome::NotFound { .. } => (None, None),
            Outcome::Fatal(m) => (Some(m.clone()), None),
            Outcome::Unjudged(m) => (None, Some(m.clone())),
        };
        let needed_by = rel(&s.objs[e.from].realname, snap, s.objs[e.from].node);
        if let Some(m) = unjudged {
            not_judged(scan, format!("{needed_by} → {}: {m}", e.name));
            continue;
        }
        if !seen.insert((e.name.clone(), needed_by.clone())) || scan.missing.len() >= MAX_MISSING {
            continue;
        }
        let capability = driver_libs::driver_lib_for(&e.name)
            .filter(|l| inputs.gpu && !caps.contains(&l.capability))
            .map(|l| l.capability.name().to_string());
        let dlopen_rule = (e.via == RequestKind::Dlopen)
            .then(|| ctx.rule_for(e.from))
            .flatten();
        let elsewhere = (error.is_none() && !e.name.contains('/'))
            .then(|| by_name.get(e.name.as_str()))
            .flatten()
            .map(|&i| snap.path_of(i).trim_start_matches('/').to_string());
        scan.missing.push(Missing {
            name: file_name(&e.name).to_string(),
            elsewhere,
            needed_by,
            via: e.via,
            chain: ctx.chain(e.from),
            error,
            optional: ctx.optional(e.from)
                || e.via == RequestKind::Dlopen && ctx.optional_name(&e.name),
            when: dlopen_rule.map(|r| r.when.to_string()),
            capability,
        });
    }
}

/// A path relative to the rootfs, for the report.
fn rel(realname: &str, snap: &Snapshot, node: Option<Idx>) -> String {
    if realname.starts_with('/') {
        realname.trim_start_matches('/').to_string()
    } else {
        node.map(|n| snap.path_of(n).trim_start_matches('/').to_string())
            .unwrap_or_else(|| realname.to_string())
    }
}

/// Who loaded whom in one session.
struct Ctx<'s> {
    s: &'s Session<'s>,
    snap: &'s Snapshot,
    /// The request that first loaded each object.
    parent: HashMap<usize, (usize, RequestKind, String)>,
}

impl<'s> Ctx<'s> {
    fn new(s: &'s Session<'s>, snap: &'s Snapshot) -> Ctx<'s> {
        let mut parent = HashMap::new();
        for e in &s.edges[s.edges_before_root..] {
            if let Outcome::Found(n) = e.outcome {
                if Some(n) != s.root && n != e.from {
                    parent.entry(n).or_insert((e.from, e.via, e.name.clone()));
                }
            }
        }
        Ctx { s, snap, parent }
    }

    /// The objects from the root to `o`, relative to the rootfs.
    fn chain(&self, o: usize) -> Vec<String> {
        let mut v = Vec::new();
        let mut cur = Some(o);
        while let Some(c) = cur {
            if v.len() > 64 {
                break;
            }
            let obj = &self.s.objs[c];
            v.push(rel(&obj.realname, self.snap, obj.node));
            cur = self.parent.get(&c).map(|p| p.0);
        }
        v.reverse();
        v
    }

    /// Is `o`, or what opened it, an optional plugin?
    fn optional(&self, o: usize) -> bool {
        let mut cur = Some(o);
        let mut hops = 0;
        while let Some(c) = cur {
            hops += 1;
            if hops > 64 {
                return false;
            }
            if self.optional_name(&self.s.objs[c].realname) {
                return true;
            }
            cur = self.parent.get(&c).map(|p| p.0);
        }
        false
    }

    fn optional_name(&self, name: &str) -> bool {
        RULES.iter().any(|r| r.optional.contains(&file_name(name)))
    }

    fn rule_for(&self, opener: usize) -> Option<&'static Rule> {
        let o = &self.s.objs[opener];
        let soname = o.info.as_ref().and_then(|i| i.soname.as_deref());
        RULES
            .iter()
            .find(|r| r.applies(file_name(&o.realname), soname))
    }
}
