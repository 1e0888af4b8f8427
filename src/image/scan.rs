//! The GPU code and the forward-compatibility libraries of an image, read
//! from its layers without unpacking them (`gpu-guard check --image`).
//!
//! One pass over the layers ([`Image::index_with`]) builds the final tree
//! and, as they stream by, scans every regular file whose entry path
//! matches a `kernel_image.libraries` glob (or looks like a compat
//! `libcuda.so.X.Y` under a `compat/` directory) with the streaming fatbin
//! scanner ([`crate::scan::stream_fatbin`]: one sequential read, bounded
//! memory, any size). Then only what the final tree still points at is
//! kept; files the globs reach only through a symlink or a hard link, which
//! the first pass could not know, are read in a second, targeted pass
//! ([`Image::read_files`]: only the layers holding them, up to the last).
//!
//! The budgets of `[kernel_image]` apply to the final libraries as they do
//! in a rootfs (files, bytes, fatbin entries, in path order); its time
//! budget, sized for a container start, does not: reading an image is
//! bounded by the image reader's own [`super::Limits`].

use super::libraries::{candidate, LibraryTap};
use super::{ContentRef, Image, ImageError, ImageFile, Kind, ReadAtBuf, Tree, MAX_READAT_BYTES};
use crate::core::amd::AmdCode;
use crate::core::kernel_image::{Image as Code, Library, Outcome, Scanned};
use crate::core::policy::KernelImageConfig;
use crate::scan::compat_lib::{self, CompatLib, CompatScan, COMPAT_DIR, MAX_LIBS};
use crate::scan::fatbin::{self, Budget, FatbinError};
use crate::scan::glob::{self, Pattern};
use crate::scan::stream_fatbin;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Read};

/// The most unscanned libraries named when a budget stops the scan.
const MAX_NOT_SCANNED_LISTED: usize = 64;

/// What reading the image's libraries gave.
#[derive(Clone, Debug, Default)]
pub struct ImageScan {
    /// The kernel-image input, as [`crate::scan::libraries::scan_rootfs`]
    /// builds it from a rootfs.
    pub scanned: Scanned,
    /// The compat libraries of `usr/local/cuda/compat` (resolved in the
    /// image), as [`compat_lib::scan_root`] finds them in a rootfs.
    pub compat: CompatScan,
    /// Things worth saying about how the libraries were read (one line
    /// each, no image bytes other than escaped paths).
    pub notes: Vec<String>,
    pub stats: ScanStats,
}

/// What the scan cost, for tests and the benchmark.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Files scanned while the layers streamed (kept or not).
    pub first_pass_files: usize,
    /// Of those, files a later layer deleted or replaced.
    pub discarded: usize,
    /// Files read in the second pass, and the layers it streamed again.
    pub second_pass_files: usize,
    pub layers_read_again: usize,
}

/// A library's distinct images, its fatbin entry count, whether its
/// section names were known (see [`stream_fatbin::StreamScan`]), and its
/// distinct AMD code objects.
type CodeScan = Result<(Vec<Code>, u64, bool, Vec<AmdCode>), Failure>;

/// One file's result, by where its content is.
#[derive(Clone, Debug)]
struct FileResult {
    /// Distinct images and the number of fatbin entries, or why not.
    code: Option<CodeScan>,
    note: Option<Result<crate::core::compat::CompatNote, String>>,
}

#[derive(Clone, Debug)]
enum Failure {
    /// The per-library entry budget ran out.
    Budget,
    Unreadable(String),
}

/// Remembers the error of the underlying stream, so a broken layer is an
/// image error rather than one unreadable library.
struct Tracking<'a> {
    inner: &'a mut dyn Read,
    failed: Option<(io::ErrorKind, String)>,
}

impl Read for Tracking<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).inspect_err(|e| {
            self.failed = Some((e.kind(), e.to_string()));
        })
    }
}

fn is_compat_name(name: &str) -> bool {
    name.strip_prefix("libcuda.so.")
        .is_some_and(|rest| !rest.is_empty() && rest.contains('.'))
}

/// Could this path be a compat library once symlinks are resolved?
fn maybe_compat(path: &str) -> bool {
    match path.rsplit_once('/') {
        Some((dir, name)) => (dir == "compat" || dir.ends_with("/compat")) && is_compat_name(name),
        None => false,
    }
}

/// Reads one file for what `want_code` / `want_note` ask.
fn read_file(
    f: &ImageFile,
    r: &mut dyn Read,
    want_code: bool,
    want_note: bool,
    max_entries: u64,
) -> io::Result<FileResult> {
    let mut t = Tracking {
        inner: r,
        failed: None,
    };
    let mut budget = Budget {
        entries_left: max_entries,
        deadline: None,
    };
    let mut out = FileResult {
        code: None,
        note: None,
    };
    let code_of = |r: Result<(Vec<fatbin::Entry>, bool, Vec<AmdCode>), FatbinError>| match r {
        Ok((entries, known, amd)) => {
            let n = entries.len() as u64 + amd.len() as u64;
            let amd: BTreeSet<AmdCode> = amd.into_iter().collect();
            let set: BTreeSet<Code> = entries
                .into_iter()
                .map(|e| Code {
                    kind: e.kind,
                    arch: e.arch,
                    ptx_isa: e.ptx_isa,
                })
                .collect();
            Ok((
                set.into_iter().collect(),
                n,
                known,
                amd.into_iter().collect(),
            ))
        }
        Err(e) if e.is_budget() => Err(Failure::Budget),
        Err(e) => Err(Failure::Unreadable(e.to_string())),
    };
    if want_note {
        // The note reader needs positioned reads: the file in memory, up
        // to the bound (compat libcuda is 30-70 MiB).
        match ReadAtBuf::read(&mut t, f.size, MAX_READAT_BYTES)? {
            Some(buf) => {
                out.note = Some(compat_lib::read_note(&buf));
                if want_code {
                    let mut v = Vec::new();
                    let r = fatbin::scan_image(&buf, &mut budget, &mut |e| v.push(e));
                    let mut a = Vec::new();
                    let r = r.and_then(|()| {
                        crate::scan::amd::scan_image(&buf, &mut budget, &mut |c| a.push(c))
                    });
                    out.code = Some(code_of(r.map(|()| (v, true, a))));
                }
            }
            None => {
                let msg = format!(
                    "the file is over {MAX_READAT_BYTES} bytes, too large to read from an image"
                );
                out.note = Some(Err(msg.clone()));
                if want_code {
                    out.code = Some(Err(Failure::Unreadable(msg)));
                }
            }
        }
    } else if want_code {
        let r = stream_fatbin::scan_stream(&mut t, f.size, &mut budget);
        out.code = Some(code_of(r.map(|s| (s.entries, s.sections_known, s.amd))));
    }
    if let Some((kind, msg)) = t.failed {
        return Err(io::Error::new(kind, msg));
    }
    Ok(out)
}

/// Where a final path's bytes are: its own content, or a symlink's
/// target's. A symlink loop is nothing; a budget that runs out while
/// resolving ends the scan.
fn content_of(tree: &Tree, p: &str) -> Result<Option<(String, ContentRef, u64)>, ImageError> {
    let Some(node) = tree.get(p) else {
        return Ok(None);
    };
    let (real, node) = match &node.kind {
        Kind::File => (p.to_string(), node),
        Kind::Symlink(_) => {
            let r = match tree.resolve(p) {
                Ok(r) => r,
                Err(e) if e.is_budget() => return Err(e),
                Err(_) => return Ok(None),
            };
            match tree.get(&r) {
                Some(n) if n.kind == Kind::File => (r, n),
                _ => return Ok(None),
            }
        }
        _ => return Ok(None),
    };
    Ok(node.content.map(|c| (real, c, node.size)))
}

/// A final library: its path, where its bytes are, its size.
type Lib = (String, ContentRef, u64);

/// A compat library of the final tree.
struct Compat {
    path: String,
    version: String,
    content: ContentRef,
}

/// The results of reading files, by where their content is.
type Results = HashMap<ContentRef, FileResult>;

/// Reads the configured libraries and the compat libraries of `img`.
pub fn scan(img: &Image, cfg: &KernelImageConfig) -> Result<ImageScan, ImageError> {
    scan_with(img, cfg, None).map(|(s, _)| s)
}

/// [`scan`], its header pass also reading what the libraries scan needs
/// (`libs`: image::libraries, so `check --image` streams every layer once
/// for both), and the final tree.
pub fn scan_with(
    img: &Image,
    cfg: &KernelImageConfig,
    mut libs: Option<&mut LibraryTap>,
) -> Result<(ImageScan, Tree), ImageError> {
    let patterns: Vec<Pattern> = crate::scan::libraries::patterns(cfg)
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    let is_lib = |p: &str| patterns.iter().any(|g| glob::match_path(g, p));
    let mut results: Results = HashMap::new();
    let mut out = ImageScan::default();
    let max_entries = cfg.max_entries;
    let tapped = libs.is_some();
    let mut texts: HashMap<ContentRef, String> = HashMap::new();
    let wanted = |p: &str| {
        is_lib(p) || maybe_compat(p) || (tapped && candidate(p)) || super::amd::is_version_file(p)
    };
    let tree = img.index_with(&wanted, &mut |c, f, r| {
        let (code, note) = (is_lib(&f.path), maybe_compat(&f.path));
        let version = super::amd::is_version_file(&f.path);
        let mut res = None;
        let mut read = |r: &mut dyn Read| -> io::Result<()> {
            if code || note {
                res = Some(read_file(f, r, code, note, max_entries)?);
            } else if version {
                if let Some(t) = super::amd::read_text(r, f.size)? {
                    texts.insert(c, t);
                }
            }
            Ok(())
        };
        match libs.as_deref_mut() {
            Some(tap) if candidate(&f.path) => tap.visit(c, f, r, &mut read)?,
            _ => read(r)?,
        }
        if let Some(res) = res {
            out.stats.first_pass_files += 1;
            results.insert(c, res);
        }
        Ok(())
    })?;
    let libs = final_libraries(img, &tree, &is_lib)?;
    let compat = compat_libraries(&tree, &mut out.compat)?;
    let lib_refs: BTreeSet<ContentRef> = libs.iter().map(|l| l.1).collect();
    let compat_refs: BTreeSet<ContentRef> = compat.iter().map(|c| c.content).collect();
    out.stats.discarded = results
        .keys()
        .filter(|c| !lib_refs.contains(c) && !compat_refs.contains(c))
        .count();
    let wanted = Wanted {
        libs: &libs,
        compat: &compat,
        lib_refs: &lib_refs,
        compat_refs: &compat_refs,
    };
    second_pass(
        img,
        &tree,
        &wanted,
        max_entries,
        &mut results,
        &mut out.stats,
    )?;
    let amd = judge_libraries(libs, &results, cfg, &mut out);
    (out.scanned.amd, out.scanned.rocm) = super::amd::finish(&tree, amd, &texts)?;
    for c in compat {
        let note = results
            .get(&c.content)
            .and_then(|r| r.note.clone())
            .unwrap_or_else(|| Err("the file could not be read from the image".to_string()));
        out.compat.libs.push(CompatLib {
            path: c.path,
            version: c.version,
            note,
        });
    }
    Ok((out, tree))
}

/// The final libraries, in path order, one per distinct content.
fn final_libraries(
    img: &Image,
    tree: &Tree,
    is_lib: &dyn Fn(&str) -> bool,
) -> Result<Vec<Lib>, ImageError> {
    let mut libs = Vec::new();
    let mut seen = BTreeSet::new();
    for (k, (p, _)) in tree.iter().enumerate() {
        if k % 1024 == 0 {
            img.check_time()?;
        }
        if !is_lib(p) {
            continue;
        }
        if let Some((_, c, size)) = content_of(tree, p)? {
            if seen.insert(c) {
                libs.push((p.to_string(), c, size));
            }
        }
    }
    Ok(libs)
}

/// The compat directory as the hook finds it: resolved, regular files
/// named libcuda.so.X.Y directly in it (at most [`MAX_LIBS`]).
fn compat_libraries(tree: &Tree, scan: &mut CompatScan) -> Result<Vec<Compat>, ImageError> {
    let mut compat = Vec::new();
    let dir = match tree.resolve(COMPAT_DIR) {
        Ok(d) => d,
        Err(e) if e.is_budget() => return Err(e),
        Err(_) => return Ok(compat),
    };
    if !tree.get(&dir).is_some_and(|n| n.kind == Kind::Dir) {
        return Ok(compat);
    }
    let prefix = format!("{dir}/");
    for (p, n) in tree.under(&prefix) {
        let name = &p[prefix.len()..];
        if name.contains('/') || !is_compat_name(name) || n.kind != Kind::File {
            continue;
        }
        if compat.len() >= MAX_LIBS {
            scan.truncated = true;
            break;
        }
        if let Some(content) = n.content {
            compat.push(Compat {
                path: p.to_string(),
                version: name["libcuda.so.".len()..].to_string(),
                content,
            });
        }
    }
    Ok(compat)
}

/// What the final tree keeps, and what each content is read for.
struct Wanted<'a> {
    libs: &'a [Lib],
    compat: &'a [Compat],
    lib_refs: &'a BTreeSet<ContentRef>,
    compat_refs: &'a BTreeSet<ContentRef>,
}

/// Reads what the first pass could not know (files the globs reach only
/// through a symlink or a hard link) in a second, targeted pass.
fn second_pass(
    img: &Image,
    tree: &Tree,
    w: &Wanted,
    max_entries: u64,
    results: &mut Results,
    stats: &mut ScanStats,
) -> Result<(), ImageError> {
    let missing = |c: &ContentRef| {
        let r = results.get(c);
        (w.lib_refs.contains(c) && !matches!(r, Some(x) if x.code.is_some()))
            || (w.compat_refs.contains(c) && !matches!(r, Some(x) if x.note.is_some()))
    };
    let mut todo: BTreeSet<String> = BTreeSet::new();
    let paths = w.libs.iter().map(|l| (l.0.as_str(), l.1));
    let paths = paths.chain(w.compat.iter().map(|c| (c.path.as_str(), c.content)));
    for (p, _) in paths.filter(|(_, c)| missing(c)) {
        if let Some((real, _, _)) = content_of(tree, p)? {
            todo.insert(real);
        }
    }
    if todo.is_empty() {
        return Ok(());
    }
    let mut by_content: BTreeMap<String, ContentRef> = BTreeMap::new();
    for p in &todo {
        if let Some((_, c, _)) = content_of(tree, p)? {
            by_content.insert(p.clone(), c);
        }
    }
    let mut fresh: Vec<(ContentRef, FileResult)> = Vec::new();
    let read = img.read_files(tree, &|p| todo.contains(p), &mut |f, r| {
        let Some(c) = by_content.get(&f.path).copied() else {
            return Ok(());
        };
        let (code, note) = (w.lib_refs.contains(&c), w.compat_refs.contains(&c));
        fresh.push((c, read_file(f, r, code, note, max_entries)?));
        Ok(())
    })?;
    stats.second_pass_files = read.files;
    stats.layers_read_again = read.layers_read;
    results.extend(fresh);
    Ok(())
}

/// Budgets over the final libraries, as the rootfs scan counts them
/// (files, bytes, fatbin entries, in path order), into `out.scanned`.
fn judge_libraries(
    libs: Vec<Lib>,
    results: &Results,
    cfg: &KernelImageConfig,
    out: &mut ImageScan,
) -> Vec<(String, Vec<AmdCode>)> {
    let mut amd = Vec::new();
    let (mut files, mut bytes, mut entries) = (0u64, 0u64, 0u64);
    let entry_budget = || format!("entry budget of {} fatbin entries used up", cfg.max_entries);
    let mut unknown_sections = Vec::new();
    let mut rest = libs.into_iter();
    for (path, c, size) in rest.by_ref() {
        files += 1;
        bytes = bytes.saturating_add(size);
        let stop = if files > cfg.max_files {
            Some(format!("more than {} libraries matched", cfg.max_files))
        } else if bytes > cfg.max_bytes {
            Some(format!(
                "the matched libraries exceed {} bytes",
                cfg.max_bytes
            ))
        } else {
            None
        };
        let code = results.get(&c).and_then(|r| r.code.clone());
        let outcome: Outcome = match (stop, code) {
            (Some(reason), _) => {
                out.scanned.incomplete = Some(reason);
                out.scanned.not_scanned.push(path);
                break;
            }
            (None, Some(Ok((images, n, known, codes)))) => {
                amd.push((path.clone(), codes));
                entries = entries.saturating_add(n);
                if entries > cfg.max_entries {
                    out.scanned.incomplete = Some(entry_budget());
                    out.scanned.not_scanned.push(path);
                    break;
                }
                if !known {
                    unknown_sections.push(path.clone());
                }
                Ok(images)
            }
            (None, Some(Err(Failure::Budget))) => {
                out.scanned.incomplete = Some(entry_budget());
                out.scanned.not_scanned.push(path);
                break;
            }
            (None, Some(Err(Failure::Unreadable(e)))) => Err(e),
            (None, None) => Err("the file could not be read from the image".to_string()),
        };
        out.scanned.libraries.push(Library { path, outcome });
    }
    if out.scanned.incomplete.is_some() {
        out.scanned
            .not_scanned
            .extend(rest.take(MAX_NOT_SCANNED_LISTED).map(|l| l.0));
    }
    if !unknown_sections.is_empty() {
        let shown: Vec<String> = unknown_sections
            .iter()
            .take(4)
            .map(|p| crate::core::sanitize::esc_bounded(p, 200))
            .collect();
        out.notes.push(format!(
            "the section names of {} could not be kept while streaming; every fat binary \
             container and offload bundle in the file was counted, in its section or not",
            shown.join(", ")
        ));
    }
    amd
}
