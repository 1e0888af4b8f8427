//! How containerd reads its configuration: the main file, then the files
//! its `imports` name, merged into what `containerd config dump` prints.
//! gpu-guard must be the runtime of that merged result, not merely present
//! in one file, so install plans against this model and `install --check`
//! (and `gpu-guard host`) judge the engine with it.
//!
//! Loading (containerd `services/server/config/config.go` in 1.6 and 1.7,
//! `cmd/containerd/server/config/config.go` in 2.x, `LoadConfig`): a queue
//! that starts with the main file; each file is decoded, merged into the
//! result, and the files of its `imports` are appended to the queue, so the
//! main file's imports load in order, then what they import (breadth
//! first). A path already loaded is skipped (circular imports).
//!
//! `resolveImports`: an import containing `*` is a glob (Go's
//! `filepath.Glob`: every component may hold `*`, `?` and `[...]`, names
//! are matched in sorted byte order, and `*` matches a leading dot too);
//! any other import is a literal path, which must exist (containerd fails
//! to start otherwise). Relative imports are relative to the importing
//! file's directory; before containerd 1.6.29 and 1.7.16 a relative glob
//! was taken relative to containerd's working directory instead (commit
//! 256637249 "Fix config import relative path glob"): gpu-guard follows
//! the current behaviour.
//!
//! `mergeConfig`:
//! - containerd 1.x: `for k, v := range from.Plugins { to.Plugins[k] = v }`:
//!   an imported file that has a plugin's section replaces that section
//!   **whole** (containerd issue #5837). The CRI plugin's settings are the
//!   section of the last file that has one.
//! - containerd 2.x: that loop is gone (PR #9982, commit a21e379b, first in
//!   v2.0.0): plugin sections merge table by table at every depth, a value
//!   (arrays included) of a later file replacing the earlier one
//!   (`TestMergingPluginsWithTwoCriRuntimeDropInConfigs` and
//!   `...WithPodAnnotations...` in config_test.go). Version 1 files are
//!   migrated before the merge (`cri` becomes `io.containerd.grpc.v1.cri`),
//!   and a merged config older than version 3 has the runtime section taken
//!   from `io.containerd.grpc.v1.cri` (plugins/cri/runtime/plugin.go,
//!   `ConfigMigration`).
//! - `version`: the last file that sets one wins (mergo `WithOverride`
//!   skips zero values).
//!
//! Which containerd runs is not in its config; a version 3 config needs
//! 2.x, while a version 1 or 2 config is judged under both rules, and
//! install writes what holds under both.

use std::collections::BTreeMap;
use std::io;
use std::path::{Component, Path, PathBuf};

use toml_edit::{DocumentMut, Item, Table};

/// The most files one load follows: a config tree is a handful of files;
/// a cycle of globs or a huge conf.d is not one.
const MAX_FILES: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("{} imports {}, which does not exist; containerd will not start until it does", parent.display(), path.display())]
    MissingImport { parent: PathBuf, path: PathBuf },
    #[error("{} is not valid TOML ({message}); containerd will not start with it", path.display())]
    Toml { path: PathBuf, message: String },
    #[error("{} has an import pattern containerd refuses: {pattern}", parent.display())]
    BadPattern { parent: PathBuf, pattern: String },
    #[error("containerd's config imports more than {MAX_FILES} files from {}", main.display())]
    TooMany { main: PathBuf },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The host's files as containerd sees them (host paths). Implemented over
/// `--host-root` by the planner, and over a map by the tests.
pub trait ConfigFs {
    /// The file's text; `None` when it does not exist.
    fn read(&self, path: &Path) -> Result<Option<String>, MergeError>;
    /// The names in a directory (any type), unsorted; empty when absent.
    fn list(&self, dir: &Path) -> Vec<String>;
}

/// One file as loaded.
#[derive(Debug, Clone)]
pub struct Source {
    pub path: PathBuf,
    pub doc: DocumentMut,
}

/// The files containerd loads, in load order, from `main` (which may be
/// absent: containerd then runs on its defaults). `skip` leaves files out
/// (gpu-guard's own drop-in, to see the configuration without it).
pub fn load(
    fs: &dyn ConfigFs,
    main: &Path,
    skip: &dyn Fn(&Path) -> bool,
) -> Result<Vec<Source>, MergeError> {
    let mut out: Vec<Source> = Vec::new();
    let mut loaded: Vec<PathBuf> = Vec::new();
    let mut pending: std::collections::VecDeque<(PathBuf, Option<PathBuf>)> =
        [(main.to_path_buf(), None)].into();
    while let Some((path, parent)) = pending.pop_front() {
        if loaded.contains(&path) {
            continue;
        }
        if loaded.len() >= MAX_FILES {
            return Err(MergeError::TooMany {
                main: main.to_path_buf(),
            });
        }
        loaded.push(path.clone());
        let text = match (fs.read(&path)?, &parent) {
            (Some(t), _) => t,
            (None, None) => continue,
            (None, Some(p)) => {
                return Err(MergeError::MissingImport {
                    parent: p.clone(),
                    path,
                })
            }
        };
        let doc = text.parse::<DocumentMut>().map_err(|e| MergeError::Toml {
            path: path.clone(),
            message: crate::install::toml_error_line(&text, &e),
        })?;
        for imp in resolve_imports(fs, &path, &doc)? {
            pending.push_back((imp, Some(path.clone())));
        }
        if !skip(&path) {
            out.push(Source { path, doc });
        }
    }
    Ok(out)
}

/// `imports` of one file as containerd resolves them.
fn resolve_imports(
    fs: &dyn ConfigFs,
    parent: &Path,
    doc: &DocumentMut,
) -> Result<Vec<PathBuf>, MergeError> {
    let Some(list) = doc.get("imports").and_then(Item::as_array) else {
        return Ok(vec![]);
    };
    let mut out = vec![];
    for imp in list.iter().filter_map(|v| v.as_str()) {
        let mut path = clean(Path::new(imp));
        if path.is_relative() {
            path = clean(&parent.parent().unwrap_or(Path::new("/")).join(path));
        }
        if imp.contains('*') {
            out.extend(glob(fs, &path).ok_or_else(|| MergeError::BadPattern {
                parent: parent.to_path_buf(),
                pattern: imp.to_string(),
            })?);
        } else {
            out.push(path);
        }
    }
    Ok(out)
}

/// Go's `filepath.Clean`, lexically: `.` dropped, `..` removing the
/// component before it (never above `/`).
fn clean(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() && p.is_relative() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// `filepath.Glob` over `fs`: the matching paths, each directory's names in
/// sorted order; `None` for a malformed pattern (an unclosed `[`).
pub fn glob(fs: &dyn ConfigFs, pattern: &Path) -> Option<Vec<PathBuf>> {
    let mut found = vec![PathBuf::from("/")];
    if pattern.is_relative() {
        found = vec![PathBuf::new()];
    }
    for c in pattern.components() {
        let Component::Normal(part) = c else { continue };
        let part = part.to_string_lossy();
        let mut next = vec![];
        for dir in &found {
            if !part.contains(['*', '?', '[', '\\']) {
                next.push(dir.join(part.as_ref()));
                continue;
            }
            let mut names = fs.list(dir);
            names.sort();
            for n in names {
                if go_match(&part, &n)? {
                    next.push(dir.join(n));
                }
            }
        }
        found = next;
    }
    // A literal last component must exist, as Glob's Lstat checks.
    Some(
        found
            .into_iter()
            .filter(|p| {
                let dir = p.parent().unwrap_or(Path::new("/"));
                let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
                name.is_some_and(|n| fs.list(dir).contains(&n))
            })
            .collect(),
    )
}

/// Go's `path.Match` for one path component: `*`, `?`, `[...]` with ranges
/// and `^` negation, `\` escapes. `None` for a malformed pattern.
pub fn go_match(pattern: &str, name: &str) -> Option<bool> {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    match_from(&p, &n)
}

fn match_from(p: &[char], n: &[char]) -> Option<bool> {
    let Some((&first, rest)) = p.split_first() else {
        return Some(n.is_empty());
    };
    match first {
        '*' => {
            for i in 0..=n.len() {
                if match_from(rest, &n[i..])? {
                    return Some(true);
                }
            }
            // Keep checking the pattern's syntax, as Go reports it.
            match_from(rest, &[]).map(|_| false)
        }
        '?' => match n.split_first() {
            Some((_, nr)) => match_from(rest, nr),
            None => check_syntax(rest).map(|_| false),
        },
        '[' => {
            let (set_ok, after) = class(rest, n.first().copied())?;
            match (set_ok, n.split_first()) {
                (true, Some((_, nr))) => match_from(after, nr),
                _ => check_syntax(after).map(|_| false),
            }
        }
        '\\' => {
            let (&lit, after) = rest.split_first()?;
            match n.split_first() {
                Some((&c, nr)) if c == lit => match_from(after, nr),
                _ => check_syntax(after).map(|_| false),
            }
        }
        c => match n.split_first() {
            Some((&d, nr)) if d == c => match_from(rest, nr),
            _ => check_syntax(rest).map(|_| false),
        },
    }
}

/// `Some(())` when the rest of a pattern is well formed.
fn check_syntax(p: &[char]) -> Option<()> {
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '[' => {
                let (_, after) = class(&p[i + 1..], None)?;
                i = p.len() - after.len();
            }
            '\\' => {
                p.get(i + 1)?;
                i += 2;
            }
            _ => i += 1,
        }
    }
    Some(())
}

/// A character class after its `[` (Go's `matchChunk`): whether `c` is in
/// it, and the pattern after its `]`; `None` when malformed.
fn class(p: &[char], c: Option<char>) -> Option<(bool, &[char])> {
    let mut p = p;
    let negated = p.first() == Some(&'^');
    if negated {
        p = &p[1..];
    }
    let mut hit = false;
    let mut ranges = 0;
    loop {
        if p.first() == Some(&']') && ranges > 0 {
            p = &p[1..];
            break;
        }
        let (lo, rest) = get_esc(p)?;
        p = rest;
        let mut hi = lo;
        if p.first() == Some(&'-') {
            let (h, rest) = get_esc(&p[1..])?;
            hi = h;
            p = rest;
        }
        if c.is_some_and(|c| lo <= c && c <= hi) {
            hit = true;
        }
        ranges += 1;
    }
    Some((c.is_some() && hit != negated, p))
}

/// One class character (Go's `getEsc`): `-` and `]` must be escaped, and
/// the class must go on after it.
fn get_esc(p: &[char]) -> Option<(char, &[char])> {
    let (&first, mut rest) = p.split_first()?;
    if first == '-' || first == ']' {
        return None;
    }
    let ch = if first == '\\' {
        let (&e, r) = rest.split_first()?;
        rest = r;
        e
    } else {
        first
    };
    if rest.is_empty() {
        return None;
    }
    Some((ch, rest))
}

/// containerd's two ways of merging plugin sections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    /// containerd 1.6/1.7: the last file with a plugin's section wins whole.
    Replace,
    /// containerd 2.x: tables merge key by key at every depth.
    Deep,
}

impl Rules {
    pub fn describe(self) -> &'static str {
        match self {
            Rules::Replace => "containerd 1.x",
            Rules::Deep => "containerd 2.x",
        }
    }
}

/// A file's `version`: absent is 1 (containerd-config.toml(5)), and
/// anything else than 1 to 4 is not a config containerd reads.
fn file_version(doc: &DocumentMut) -> Option<i64> {
    match doc.get("version") {
        None => None,
        Some(v) => v.as_integer(),
    }
}

/// What the CRI runtime plugin sees after the merge.
#[derive(Debug, Clone)]
pub struct Effective {
    pub rules: Rules,
    /// The merged `version` (1 when no file sets one).
    pub version: i64,
    /// The merged section of the CRI runtime plugin (empty: containerd's
    /// defaults: `default_runtime_name = "runc"`, a runc runtime).
    pub section: Table,
    /// Where each setting came from: dotted keys below the section
    /// (`containerd.default_runtime_name`, `containerd.runtimes.NAME`),
    /// and `""` for the file whose section won (under [`Rules::Replace`]).
    pub from: BTreeMap<String, PathBuf>,
}

/// The CRI plugin key of a file of version `v` (nvidia-container-toolkit
/// pkg/config/engine/containerd/containerd.go, `criRuntimePluginName`).
pub fn cri_key(v: i64) -> &'static str {
    match v {
        1 => "cri",
        2 => "io.containerd.grpc.v1.cri",
        _ => "io.containerd.cri.v1.runtime",
    }
}

fn section_of<'a>(doc: &'a DocumentMut, key: &str) -> Option<&'a Table> {
    doc.get("plugins")?.as_table()?.get(key)?.as_table()
}

/// The merged CRI runtime section of `files` (in load order) under `rules`.
pub fn effective(files: &[Source], rules: Rules) -> Effective {
    let version = files
        .iter()
        .filter_map(|f| file_version(&f.doc))
        .next_back()
        .unwrap_or(1);
    let mut eff = Effective {
        rules,
        version,
        section: Table::new(),
        from: BTreeMap::new(),
    };
    match rules {
        Rules::Replace => {
            let key = if version == 1 { "cri" } else { cri_key(2) };
            if let Some(f) = files
                .iter()
                .rev()
                .find(|f| section_of(&f.doc, key).is_some())
            {
                if let Some(s) = section_of(&f.doc, key) {
                    eff.section = s.clone();
                }
                eff.from.insert(String::new(), f.path.clone());
                note_sources(&mut eff.from, &eff.section, "", &f.path);
            }
        }
        Rules::Deep => {
            // Version 1 files are migrated to the grpc key; a merged config
            // below version 3 takes the runtime section from it.
            let key = if version < 3 { cri_key(2) } else { cri_key(3) };
            for f in files {
                let fv = file_version(&f.doc).unwrap_or(1);
                let own = if fv == 1 { "cri" } else { key };
                if let Some(s) = section_of(&f.doc, own) {
                    deep_merge(&mut eff.section, s);
                    note_sources(&mut eff.from, s, "", &f.path);
                }
            }
        }
    }
    eff
}

/// Records `file` as the source of every key of `t` (dotted, below `prefix`).
fn note_sources(from: &mut BTreeMap<String, PathBuf>, t: &Table, prefix: &str, file: &Path) {
    for (k, item) in t.iter() {
        let key = if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        };
        if let Item::Table(sub) = item {
            note_sources(from, sub, &key, file);
        }
        from.insert(key, file.to_path_buf());
    }
}

/// Merges `over` into `base`: tables key by key, any other item replaced.
pub fn deep_merge(base: &mut Table, over: &Table) {
    for (k, item) in over.iter() {
        match (base.get_mut(k), item) {
            (Some(Item::Table(b)), Item::Table(o)) => deep_merge(b, o),
            _ => {
                base.insert(k, item.clone());
            }
        }
    }
}

impl Effective {
    fn containerd(&self) -> Option<&Table> {
        self.section.get("containerd")?.as_table()
    }

    /// `default_runtime_name`, containerd's default `runc` when unset.
    pub fn default_runtime(&self) -> String {
        self.containerd()
            .and_then(|c| c.get("default_runtime_name"))
            .and_then(Item::as_str)
            .unwrap_or("runc")
            .to_string()
    }

    /// The runtimes the section defines (containerd's own runc when none).
    pub fn runtime(&self, name: &str) -> Option<&Table> {
        self.containerd()?.get("runtimes")?.get(name)?.as_table()
    }

    /// The names of the runtimes the section defines.
    pub fn runtime_names(&self) -> Vec<String> {
        self.containerd()
            .and_then(|c| c.get("runtimes"))
            .and_then(Item::as_table)
            .map(|t| t.iter().map(|(k, _)| k.to_string()).collect())
            .unwrap_or_default()
    }

    /// A runtime's `options.<key>` string.
    pub fn option(&self, runtime: &str, key: &str) -> Option<String> {
        self.runtime(runtime)?
            .get("options")?
            .get(key)?
            .as_str()
            .map(str::to_string)
    }

    /// The file that set a dotted key of the section (or, under
    /// [`Rules::Replace`], the file whose section won).
    pub fn source_of(&self, key: &str) -> Option<&Path> {
        let mut k = key;
        loop {
            if let Some(p) = self.from.get(k) {
                return Some(p);
            }
            match k.rfind('.') {
                Some(i) => k = &k[..i],
                None => return self.from.get("").map(PathBuf::as_path),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_match_follows_path_match() {
        for (p, n, want) in [
            ("*.toml", "99-nvidia.toml", Some(true)),
            ("*.toml", ".hidden.toml", Some(true)),
            ("*.toml", "a.toml.bak", Some(false)),
            ("9?-*.toml", "99-x.toml", Some(true)),
            ("[0-9]*.toml", "5a.toml", Some(true)),
            ("[^0-9]*.toml", "5a.toml", Some(false)),
            ("[!0-9]*", "x", Some(false)),
            ("\\*.toml", "*.toml", Some(true)),
            ("[a-", "a", None),
            ("*[", "x", None),
            ("", "", Some(true)),
        ] {
            assert_eq!(go_match(p, n), want, "{p} {n}");
        }
    }

    #[test]
    fn clean_is_lexical() {
        assert_eq!(clean(Path::new("/etc/./a/../b")), PathBuf::from("/etc/b"));
        assert_eq!(clean(Path::new("/../x")), PathBuf::from("/x"));
        assert_eq!(clean(Path::new("a/../../b")), PathBuf::from("../b"));
    }
}
