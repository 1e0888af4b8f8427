//! `gpu-guard scan`: lists the GPU code in ELF files, or with `--rootfs`
//! the kernel-image findings a container start would get.

use crate::commands::cli::ScanArgs;
use crate::core::amd::AmdCode;
use crate::core::arch::{self, Kind};
use crate::core::decision::{Finding, Severity};
use crate::core::facts::HostFacts;
use crate::core::policy::{Enforcement, KernelImageConfig};
use crate::core::version::Version;
use crate::scan::amd::bundle::BUNDLE_MAGIC;
use crate::scan::amd::ccob::CCOB_MAGIC;
use crate::scan::fatbin::{self, Budget, Entry, FatbinError};
use crate::scan::read::{self, SizedFile};
use crate::scan::{elf, rootfs};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Exit status of `gpu-guard scan`: every file was read.
pub const EXIT_OK: i32 = 0;
/// Some file's device code could not be read (its `error` says why); the
/// listing of the others is complete.
pub const EXIT_FILE_ERROR: i32 = 1;
/// Bad usage, or a PATH operand that does not exist or cannot be opened.
pub const EXIT_BAD_INPUT: i32 = 2;

/// The deepest directory level `scan DIR` descends to.
const MAX_WALK_DEPTH: usize = 64;

/// What one file gave: its entries were already reported as they came.
struct FileResult {
    error: Option<String>,
    operand_unreadable: bool,
}

/// `gpu-guard scan [--json] PATH...`. Directories are walked (symlinks not
/// followed; files that are not ELF or fatbin are skipped); a file named
/// on the command line is always reported, ELF or not.
pub fn main(config: Option<&Path>, args: &ScanArgs) -> i32 {
    if args.rootfs && args.libraries {
        return crate::commands::scan_libraries::main(config, args);
    }
    if args.rootfs {
        return rootfs_command(config, args);
    }
    // A plain scan uses no policy, but an invalid config gets exit 2 from
    // every subcommand (docs/host.md, "Output and exit status").
    if let Err(e) = crate::config::load(config) {
        eprintln!("gpu-guard: error: {e}");
        return EXIT_BAD_INPUT;
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut status = EXIT_OK;
    let mut first_file = true;
    if args.json {
        let _ = write!(out, "{{\"files\":[");
    }
    for operand in &args.paths {
        let mut files = Vec::new();
        let operand_error = collect(operand, &mut files);
        if let Some(e) = operand_error {
            status = status.max(EXIT_BAD_INPUT);
            report_error(&mut out, args.json, &mut first_file, operand, &e);
            continue;
        }
        for (path, explicit) in files {
            let r = scan_one(&mut out, args.json, &mut first_file, &path, explicit);
            if r.operand_unreadable {
                status = status.max(EXIT_BAD_INPUT);
            } else if r.error.is_some() {
                status = status.max(EXIT_FILE_ERROR);
            }
        }
    }
    if args.json {
        let _ = writeln!(out, "]}}");
    }
    if out.flush().is_err() {
        return EXIT_BAD_INPUT.max(status);
    }
    status
}

/// `gpu-guard scan --rootfs --host FACTS ROOTFS...`: the kernel-image
/// findings a container start would get, per rootfs. Uses the config's
/// `[kernel_image]` (libraries, budgets, cache); `severity = "off"` is
/// taken as `warn`, since the check was asked for explicitly.
fn rootfs_command(config: Option<&Path>, args: &ScanArgs) -> i32 {
    let (ki, facts) = match rootfs_inputs(config, args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("gpu-guard: error: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    let driver = facts
        .cuda_driver_version
        .as_deref()
        .and_then(|v| Version::parse(v).ok());
    let mut status = EXIT_OK;
    let mut all = Vec::new();
    for rootfs in &args.paths {
        if !rootfs.is_dir() {
            eprintln!("gpu-guard: error: {}: not a directory", shown(rootfs));
            status = EXIT_BAD_INPUT;
            continue;
        }
        let scanned =
            (!facts.gpus.is_empty()).then(|| crate::scan::libraries::scan_rootfs(rootfs, &ki));
        let findings = scanned.as_ref().map_or_else(Vec::new, |s| {
            crate::core::kernel_image::assess(s, &facts.gpus, driver.as_ref(), ki.severity)
        });
        if findings.iter().any(|f| f.severity == Severity::Error) {
            status = status.max(EXIT_FILE_ERROR);
        }
        let n = scanned.map(|s| s.libraries.len());
        all.push((shown(rootfs), n, findings));
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.json {
        print_rootfs_json(&mut out, all);
    } else {
        print_rootfs_text(&mut out, all);
    }
    let _ = out.flush();
    status
}

/// The `[kernel_image]` config (`off` raised to `warn`) and the host facts
/// `--rootfs` judges against.
fn rootfs_inputs(
    config: Option<&Path>,
    args: &ScanArgs,
) -> Result<(KernelImageConfig, HostFacts), String> {
    let cfg = crate::config::load(config).map_err(|e| e.to_string())?;
    let host = args
        .host
        .as_deref()
        .ok_or("scan --rootfs needs --host FILE")?;
    let facts = crate::host::facts_file::read_facts_file(host).map_err(|e| e.to_string())?;
    let mut ki = cfg.kernel_image.clone();
    if ki.severity == Enforcement::Off {
        ki.severity = Enforcement::Warn;
    }
    Ok((ki, facts))
}

fn print_rootfs_json(out: &mut impl Write, all: Vec<(String, Option<usize>, Vec<Finding>)>) {
    let v: Vec<serde_json::Value> = all
        .into_iter()
        .map(|(p, n, f)| serde_json::json!({ "rootfs": p, "libraries_scanned": n, "findings": f }))
        .collect();
    let _ = writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({ "rootfs": v })).unwrap_or_default()
    );
}

fn print_rootfs_text(out: &mut impl Write, all: Vec<(String, Option<usize>, Vec<Finding>)>) {
    for (p, n, findings) in all {
        // Say what was scanned: "runs on every GPU" of nothing is no answer.
        match (findings.is_empty(), n) {
            (true, None) => {
                let _ = writeln!(
                    out,
                    "{p}: the host has no GPU to judge the image's GPU code on"
                );
            }
            (true, Some(0)) => {
                let _ = writeln!(
                    out,
                    "{p}: no GPU libraries found (0 scanned): nothing to judge"
                );
            }
            (true, Some(n)) => {
                let _ = writeln!(
                    out,
                    "{p}: the GPU code of the {n} librar{} scanned runs on every GPU of this host",
                    if n == 1 { "y" } else { "ies" }
                );
            }
            _ => {}
        }
        for f in findings {
            let sev = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Info => "info",
            };
            let _ = writeln!(out, "{p}: {sev}: {}", f.message);
            if let Some(fix) = f.fix {
                let _ = writeln!(out, "  fix: {fix}");
            }
        }
    }
}

/// The files an operand stands for: itself, or a directory's ELF files in
/// name order. Returns an error for an operand that cannot be looked at.
fn collect(operand: &Path, files: &mut Vec<(PathBuf, bool)>) -> Option<String> {
    match std::fs::metadata(operand) {
        Err(e) => Some(format!("cannot open {}: {e}", operand.display())),
        Ok(m) if m.is_dir() => {
            walk_dir(operand, 0, files);
            None
        }
        Ok(_) => {
            files.push((operand.to_path_buf(), true));
            None
        }
    }
}

fn walk_dir(dir: &Path, depth: usize, files: &mut Vec<(PathBuf, bool)>) {
    if depth > MAX_WALK_DEPTH {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let Ok(ft) = e.file_type() else { continue };
        let path = e.path();
        if ft.is_dir() {
            walk_dir(&path, depth + 1, files);
        } else if ft.is_file() && looks_like_device_code_file(&path) {
            files.push((path, false));
        }
    }
}

/// ELF, bare fatbin or offload bundle magic, read through the careful open.
fn looks_like_device_code_file(path: &Path) -> bool {
    let Ok(found) = rootfs::find_host(path) else {
        return false;
    };
    let Ok(file) = rootfs::open_regular(&found) else {
        return false;
    };
    let mut magic = [0u8; 4];
    if read::read_exact_at(&file, &mut magic, 0).is_err() {
        return false;
    }
    elf::is_elf(&magic)
        || u32::from_le_bytes(magic) == fatbin::FATBIN_MAGIC
        || magic == BUNDLE_MAGIC[..4]
        || &magic == CCOB_MAGIC
}

fn shown(path: &Path) -> String {
    // Non-UTF-8 bytes are shown as \xNN, like control characters.
    let bytes = path.as_os_str().as_encoded_bytes();
    let mut s = String::new();
    for chunk in bytes.utf8_chunks() {
        s.push_str(chunk.valid());
        for b in chunk.invalid() {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn report_error(out: &mut impl Write, json: bool, first: &mut bool, path: &Path, error: &str) {
    if json {
        let sep = if *first { "" } else { "," };
        *first = false;
        let _ = write!(
            out,
            "{sep}\n{{\"path\":{},\"entries\":[],\"error\":{}}}",
            json_str(&shown(path)),
            json_str(error)
        );
    } else {
        let _ = out.flush();
        eprintln!(
            "gpu-guard: {}: {}",
            crate::core::sanitize::esc_bounded(&shown(path), 4096),
            crate::core::sanitize::esc_bounded(error, 4096)
        );
    }
}

fn entry_json(e: &Entry) -> String {
    let arch = json_str(&e.arch.name(e.kind));
    match (e.kind, e.ptx_isa) {
        (Kind::Ptx, Some((a, b))) => format!(
            "{{\"kind\":\"ptx\",\"arch\":{arch},\"ptx_isa\":\"{a}.{b}\",\"compressed\":{}}}",
            e.compressed
        ),
        (Kind::Ptx, None) => format!(
            "{{\"kind\":\"ptx\",\"arch\":{arch},\"compressed\":{}}}",
            e.compressed
        ),
        (Kind::Sass, _) => format!(
            "{{\"kind\":\"sass\",\"arch\":{arch},\"compressed\":{}}}",
            e.compressed
        ),
    }
}

/// (kind, arch, PTX ISA, compressed): one line of the people's listing.
type SummaryKey = (Kind, arch::Arch, Option<(u16, u16)>, bool);

/// Scans one file, streaming its entries (JSON) or a summary (people).
fn scan_one(
    out: &mut impl Write,
    json: bool,
    first: &mut bool,
    path: &Path,
    explicit: bool,
) -> FileResult {
    let opened = rootfs::find_host(path).and_then(|f| {
        let file = rootfs::open_regular(&f)?;
        Ok((file, f.stat.size))
    });
    let (file, size) = match opened {
        Ok(x) => x,
        Err(e) => {
            report_error(out, json, first, path, &e.to_string());
            return FileResult {
                error: Some(e.to_string()),
                operand_unreadable: explicit,
            };
        }
    };
    let reader = SizedFile::new(file, size);
    let result = if json {
        scan_json(out, first, path, &reader)
    } else {
        scan_summary(out, first, path, &reader)
    };
    FileResult {
        error: result.err().map(|e| e.to_string()),
        operand_unreadable: false,
    }
}

/// One file's JSON object, its entries written as the scan finds them.
fn scan_json(
    out: &mut impl Write,
    first: &mut bool,
    path: &Path,
    reader: &SizedFile,
) -> Result<(), FatbinError> {
    let sep = if *first { "" } else { "," };
    *first = false;
    let _ = write!(
        out,
        "{sep}\n{{\"path\":{},\"entries\":[",
        json_str(&shown(path))
    );
    let mut n = 0u64;
    let result = scan_both(reader, &mut |item| {
        let sep = if n == 0 { "" } else { "," };
        n += 1;
        let json = match item {
            Code::Cuda(e) => entry_json(&e),
            Code::Amd(c) => amd_entry_json(&c),
        };
        let _ = write!(out, "{sep}\n  {json}");
    });
    match &result {
        Ok(()) => {
            let _ = write!(out, "]}}");
        }
        Err(e) => {
            let _ = write!(out, "],\"error\":{}}}", json_str(&e.to_string()));
        }
    }
    result
}

/// One file's summary for people: a count line, then one line per
/// distinct (arch, PTX ISA, compressed); a scan error goes to stderr.
fn scan_summary(
    out: &mut impl Write,
    first: &mut bool,
    path: &Path,
    reader: &SizedFile,
) -> Result<(), FatbinError> {
    let mut counts: BTreeMap<SummaryKey, u64> = BTreeMap::new();
    let mut amd: BTreeMap<(String, bool), u64> = BTreeMap::new();
    let result = scan_both(reader, &mut |item| match item {
        Code::Cuda(e) => {
            *counts
                .entry((e.kind, e.arch, e.ptx_isa, e.compressed))
                .or_insert(0) += 1
        }
        Code::Amd(c) => *amd.entry((c.arch, c.compressed)).or_insert(0) += 1,
    });
    let name = crate::core::sanitize::esc_bounded(&shown(path), 4096);
    let total: u64 = counts.values().sum();
    if total == 0 && amd.is_empty() && result.is_ok() {
        let _ = writeln!(out, "{name}: no device code");
    } else if total > 0 {
        print_counts(out, &name, &counts, total);
    }
    if !amd.is_empty() {
        print_amd_counts(out, &name, &amd);
    }
    if let Err(e) = &result {
        report_error(out, false, first, path, &e.to_string());
    }
    result
}

fn print_counts(out: &mut impl Write, name: &str, counts: &BTreeMap<SummaryKey, u64>, total: u64) {
    let sass: u64 = counts
        .iter()
        .filter(|(k, _)| k.0 == Kind::Sass)
        .map(|(_, v)| v)
        .sum();
    let _ = writeln!(out, "{name}: {sass} SASS, {} PTX", total - sass);
    for ((kind, arch, isa, compressed), n) in counts {
        let mut line = format!("  {:<14}", arch.name(*kind));
        if let Some((a, b)) = isa {
            line.push_str(&format!(" PTX ISA {a}.{b}"));
        }
        if *compressed {
            line.push_str(" compressed");
        }
        if *n > 1 {
            line.push_str(&format!(" x{n}"));
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// One piece of device code a file holds.
enum Code {
    Cuda(Entry),
    Amd(AmdCode),
}

/// The CUDA fat binaries and the HIP offload bundles of one file. A file
/// neither reader recognizes is [`FatbinError::NotElf`]; otherwise the
/// first error either met.
fn scan_both(reader: &SizedFile, visit: &mut dyn FnMut(Code)) -> Result<(), FatbinError> {
    let cuda = fatbin::scan_image(reader, &mut Budget::unlimited(), &mut |e| {
        visit(Code::Cuda(e))
    });
    let hip = crate::scan::amd::scan_image(reader, &mut Budget::unlimited(), &mut |c| {
        visit(Code::Amd(c))
    });
    match (cuda, hip) {
        (Err(FatbinError::NotElf), r) => r,
        (r, Err(FatbinError::NotElf)) => r,
        (Err(e), _) => Err(e),
        (Ok(()), r) => r,
    }
}

/// `{"kind":"amdgcn","arch":"gfx90a:xnack-","compressed":true}`
/// (docs/interfaces.md, "`gpu-guard scan`").
fn amd_entry_json(c: &AmdCode) -> String {
    format!(
        "{{\"kind\":\"amdgcn\",\"arch\":{},\"compressed\":{}}}",
        json_str(&c.arch),
        c.compressed
    )
}

fn print_amd_counts(out: &mut impl Write, name: &str, amd: &BTreeMap<(String, bool), u64>) {
    let total: u64 = amd.values().sum();
    let _ = writeln!(
        out,
        "{name}: {total} AMD code object{}",
        if total == 1 { "" } else { "s" }
    );
    for ((arch, compressed), n) in amd {
        let mut line = format!("  {:<22}", crate::core::sanitize::esc_bounded(arch, 64));
        if *compressed {
            line.push_str(" compressed");
        }
        if *n > 1 {
            line.push_str(&format!(" x{n}"));
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}
