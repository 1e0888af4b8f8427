//! Finds, reads and validates gpu-guard's config file
//! (`/etc/gpu-guard/config.toml`) into a [`Config`].

use std::path::{Path, PathBuf};

use crate::core::policy::{default_kernel_image_libraries, Config};
use crate::sys::policy_file::TrustedDirs;

mod cache;
mod comments;
mod deprecated;
mod fallback;
pub use fallback::{describe_unread, Fallback};

/// Where the config lives when neither `--config` nor `GPU_GUARD_CONFIG` says.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/gpu-guard/config.toml";
/// Environment variable naming the config file (docs/interfaces.md, "Config file").
const CONFIG_ENV: &str = "GPU_GUARD_CONFIG";
/// The shipped config, compiled in so a test can hold `Default` to it.
#[cfg(test)]
const SHIPPED_CONFIG: &str = include_str!("../config/config.toml");

/// A config that could not be used. The message names the file and the key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid gpu-guard config {}: {message}", path.display())]
pub struct ConfigError {
    pub path: PathBuf,
    pub message: String,
    /// The file could not be read at all (as opposed to read and rejected).
    pub unreadable: bool,
}

/// Resolves the config path: `--config`, then `GPU_GUARD_CONFIG`, then the default.
pub fn config_path(flag: Option<&Path>) -> (PathBuf, bool) {
    if let Some(p) = flag {
        return (p.to_path_buf(), true);
    }
    match std::env::var_os(CONFIG_ENV) {
        Some(p) if !p.is_empty() => (PathBuf::from(p), true),
        _ => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
    }
}

/// The largest config file we accept; the shipped one is a few KiB.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The drop-in directory beside a config file: `config.d` in its directory.
pub fn drop_in_dir(config: &Path) -> PathBuf {
    config
        .parent()
        .unwrap_or(Path::new("/"))
        .join(DROP_IN_DIR_NAME)
}

/// The drop-in directory's name: `/etc/gpu-guard/config.d` beside the default config.
const DROP_IN_DIR_NAME: &str = "config.d";

/// A config as loaded, with where it came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Loaded {
    pub config: Config,
    /// The main file, when it was read (a missing default file is not).
    pub main: Option<PathBuf>,
    /// The drop-ins merged over it, in the order they were applied.
    pub drop_ins: Vec<PathBuf>,
    /// The last file that set `runtime.path`, if any.
    pub runtime_path_from: Option<PathBuf>,
    /// Deprecated spellings the files use, one warning each (file:line).
    pub deprecated: Vec<String>,
}

/// Loads the config. A missing file at the default path means built-in
/// defaults (a missing default file means built-in defaults;
/// docs/configuration.md); a missing file the operator named explicitly is an
/// error, since they meant it.
pub fn load(flag: Option<&Path>) -> Result<Config, ConfigError> {
    load_detailed(flag).map(|l| l.config)
}

/// [`load`], and which files it read: the main file, then every
/// `config.d/*.toml` beside it in lexical order, each merged over what came
/// before (tables merge key by key; a value or array replaces). A package
/// or `gpu-guard install` writes a drop-in, so the admin's config.toml (a
/// conffile) is never rewritten.
///
/// Every file and directory is read as policy
/// ([`crate::sys::policy_file::read_policy_file`]): owned by root or the
/// effective uid, not writable by group or others, a regular file of at
/// most 1 MiB; `config.d` itself not writable by group or others. A file
/// or drop-in that fails is an error naming it, never skipped (a
/// `60-enforce.toml` that cannot be read must not leave an earlier
/// `50-warn.toml` in force).
pub fn load_detailed(flag: Option<&Path>) -> Result<Loaded, ConfigError> {
    let loaded = load_files(flag)?;
    for w in &loaded.deprecated {
        eprintln!("gpu-guard: warning: {w}");
    }
    Ok(loaded)
}

/// What the config cannot be used for still tells: the chain and the
/// detection settings, read leniently (see `fallback.rs`), for the policy
/// an invalid config is decided under.
pub fn fallback(flag: Option<&Path>) -> Fallback {
    fallback::read(flag)
}

/// Fills what detection reads from this host beside the config: what
/// NVIDIA's toolkit here honours decides which requests make a GPU
/// container (core::detect); a full load keeps its parse
/// ([`nvidia_settings`]). The host's device majors are read only for a
/// container with devices (pipeline::classify).
fn read_host_detection(cfg: &mut Config) {
    cfg.detect.nvidia = crate::host::nvidia_config::read(&cfg.detect.nvidia_config);
}

fn load_files(flag: Option<&Path>) -> Result<Loaded, ConfigError> {
    let (path, explicit) = config_path(flag);
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    // The main file, config.d and the drop-ins mostly share directories:
    // each is judged once.
    let mut known = TrustedDirs::default();
    match read_config_bytes(&path, &mut known) {
        Ok(bytes) => files.push((path.clone(), bytes)),
        Err(e) if e.absent && !explicit => {}
        Err(e) => return Err(e.error),
    }
    let main_read = !files.is_empty();
    for p in list_drop_ins(&drop_in_dir(&path), &mut known)? {
        let bytes = read_config_bytes(&p, &mut known).map_err(|e| e.error)?;
        files.push((p, bytes));
    }
    // Every file was read and trusted above; only their parse is kept.
    // Kept entries come only from files that parsed, so UTF-8 ones: the
    // bytes are checked as text only when they are parsed.
    let cache = cache::Parsed::for_files(&path, &files);
    let (mut loaded, kept) = match cache.get() {
        Some(k) => (k.loaded, Some(k.nvidia)),
        None => {
            let texts = files
                .into_iter()
                .map(|(p, bytes)| config_text(&p, bytes).map(|t| (p, t)).map_err(|e| e.error))
                .collect::<Result<_, _>>()?;
            (parse_files(&path, main_read, texts)?, None)
        }
    };
    let nvidia = nvidia_settings(&loaded.config.detect.nvidia_config, kept);
    if kept != Some(nvidia) {
        cache.put(&loaded, nvidia);
    }
    loaded.config.detect.nvidia = nvidia.settings;
    Ok(loaded)
}

/// What NVIDIA's toolkit config at `path` gives ([`read_host_detection`]),
/// read at every start; its parse is taken from `kept` when the path and
/// text are the ones it was made from: every start on a GPU host reads it,
/// non-GPU ones too, and parsing it as TOML each time cost about 15 µs of a
/// start (integration/bench-start.sh).
fn nvidia_settings(path: &str, kept: Option<cache::NvidiaKept>) -> cache::NvidiaKept {
    use std::hash::{Hash, Hasher};
    let text = crate::host::nvidia_config::read_text(path);
    let mut h = crate::sys::word_hash::WordHasher::default();
    (path, &text).hash(&mut h);
    let hash = h.finish();
    match kept {
        Some(k) if k.text == hash => k,
        _ => cache::NvidiaKept {
            text: hash,
            settings: text
                .as_deref()
                .map(crate::host::nvidia_config::parse)
                .unwrap_or_default(),
        },
    }
}

/// The config the files read give: the main file (when `main_read`, first
/// in `files`) and the drop-ins after it.
fn parse_files(
    path: &Path,
    main_read: bool,
    files: Vec<(PathBuf, String)>,
) -> Result<Loaded, ConfigError> {
    let mut loaded = Loaded {
        config: Config::default(),
        main: main_read.then(|| path.to_path_buf()),
        drop_ins: Vec::new(),
        runtime_path_from: None,
        deprecated: Vec::new(),
    };
    match files.as_slice() {
        [] => {}
        // The common case: one file, parsed once.
        [(_, text)] if main_read => {
            let text = comments::content(text);
            loaded.config = parse_content(&text).map_err(|message| rejected(path, message))?;
            loaded.deprecated = deprecated::warnings(path, &text);
            if !loaded.config.runtime.path.is_empty() {
                loaded.runtime_path_from = Some(path.to_path_buf());
            }
        }
        _ => merge_files(path, files, &mut loaded)?,
    }
    Ok(loaded)
}

/// Merges the main file (when read) and the drop-ins into `loaded`.
fn merge_files(
    path: &Path,
    files: Vec<(PathBuf, String)>,
    loaded: &mut Loaded,
) -> Result<(), ConfigError> {
    let mut merged = toml::Table::new();
    for (p, text) in &files {
        // Each file alone first, so an unknown key or a bad value names
        // the file it is in.
        let text = comments::content(text);
        let table = parse_file_table(&text).map_err(|m| rejected(p, m))?;
        loaded.deprecated.extend(deprecated::warnings(p, &text));
        if table
            .get("runtime")
            .and_then(|r| r.get("path"))
            .and_then(toml::Value::as_str)
            .is_some()
        {
            loaded.runtime_path_from = Some(p.clone());
        }
        merge_tables(&mut merged, table);
        if p != path {
            loaded.drop_ins.push(p.clone());
        }
    }
    let what = format!(
        "{} merged with {}",
        path.display(),
        drop_in_dir(path).display()
    );
    let cfg: Config = merged
        .try_into()
        .map_err(|e: toml::de::Error| rejected(Path::new(&what), e.message().replace('\n', " ")))?;
    cfg.validate().map_err(|m| rejected(Path::new(&what), m))?;
    validate_globs(&cfg).map_err(|m| rejected(Path::new(&what), m))?;
    if cfg.runtime.path.is_empty() {
        loaded.runtime_path_from = None;
    }
    loaded.config = cfg;
    Ok(())
}

fn rejected(path: &Path, message: String) -> ConfigError {
    ConfigError {
        path: path.to_path_buf(),
        message,
        unreadable: false,
    }
}

/// A config file that was not read, and whether it simply is not there.
struct NotRead {
    error: ConfigError,
    absent: bool,
}

/// Reads one config file as policy. An untrusted file (another owner,
/// writable by others, in a directory others can write) is rejected; one
/// that cannot be read as a config (missing, a dangling symlink, a FIFO,
/// a device, too large, not UTF-8) is unreadable.
fn read_config_file(path: &Path, known: &mut TrustedDirs) -> Result<String, NotRead> {
    config_text(path, read_config_bytes(path, known)?)
}

/// The text of the config file `path` read as `bytes`: UTF-8, or unreadable.
fn config_text(path: &Path, bytes: Vec<u8>) -> Result<String, NotRead> {
    String::from_utf8(bytes).map_err(|_| NotRead {
        error: ConfigError {
            path: path.to_path_buf(),
            message: "cannot read it: not UTF-8".into(),
            unreadable: true,
        },
        absent: false,
    })
}

/// [`read_config_file`]'s bytes, not yet checked as text.
fn read_config_bytes(path: &Path, known: &mut TrustedDirs) -> Result<Vec<u8>, NotRead> {
    use crate::sys::policy_file::{read_policy_file_in, PolicyFileError};
    let unreadable = |message: String, absent: bool| NotRead {
        error: ConfigError {
            path: path.to_path_buf(),
            message,
            unreadable: true,
        },
        absent,
    };
    match read_policy_file_in(path, MAX_CONFIG_BYTES, known) {
        Ok(bytes) => Ok(bytes),
        Err(PolicyFileError::Absent) => Err(unreadable(
            format!(
                "cannot read it: {}",
                std::io::Error::from_raw_os_error(libc::ENOENT)
            ),
            true,
        )),
        Err(PolicyFileError::Unreadable(e)) => {
            Err(unreadable(format!("cannot read it: {e}"), false))
        }
        Err(PolicyFileError::Untrusted(m)) => Err(NotRead {
            error: rejected(path, m),
            absent: false,
        }),
    }
}

/// The `*.toml` files of a drop-in directory, in lexical (byte) order;
/// hidden files (editor and package-manager leftovers) and directories are
/// skipped; anything else named `*.toml` is a drop-in that must read as
/// policy (a dangling symlink, a FIFO or a device is an error, not
/// skipped). A missing directory has none; one that others can write is an
/// error.
fn list_drop_ins(dir: &Path, known: &mut TrustedDirs) -> Result<Vec<PathBuf>, ConfigError> {
    use crate::sys::policy_file::{check_policy_dir_in, PolicyFileError};
    let fail = |message: String, unreadable: bool| ConfigError {
        path: dir.to_path_buf(),
        message,
        unreadable,
    };
    let real = match check_policy_dir_in(dir, known) {
        Ok(real) => real,
        Err(PolicyFileError::Absent) => return Ok(Vec::new()),
        Err(PolicyFileError::Unreadable(e)) => {
            return Err(fail(
                format!("cannot list the drop-in directory: {e}"),
                true,
            ))
        }
        Err(PolicyFileError::Untrusted(m)) => return Err(fail(m, false)),
    };
    let listing = |e: std::io::Error| fail(format!("cannot list the drop-in directory: {e}"), true);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&real).map_err(listing)? {
        let entry = entry.map_err(listing)?;
        let name = entry.file_name();
        let Some(n) = name.to_str() else { continue };
        if !n.ends_with(".toml") || n.starts_with('.') {
            continue;
        }
        // The entry's own type (a symlink is not followed here): a real
        // directory is not a drop-in; everything else is read, or fails.
        if entry.file_type().map_err(listing)?.is_dir() {
            continue;
        }
        out.push(dir.join(n));
    }
    out.sort();
    Ok(out)
}

/// One file of a merged config: checked on its own (unknown keys, types,
/// values), returned as the table it wrote.
fn parse_file_table(text: &comments::Content) -> Result<toml::Table, String> {
    // Values are checked once merged: a drop-in may name a framework
    // another file defines.
    parse_unvalidated(text)?;
    text.text()
        .parse::<toml::Table>()
        .map_err(|e| one_line_toml_error(text, &e))
}

/// Merges `over` into `base`: tables key by key, anything else (values,
/// arrays, arrays of tables) replaced whole.
fn merge_tables(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge_tables(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Whether `runtime.path` names gpu-guard itself, which the runtime
/// wrapper would exec forever: the same file as this process's binary
/// (through any symlink, or a bare name found on PATH), or any binary
/// named `gpu-guard-runtime` / `gpu-guard` (another copy reads the same
/// config and chains back).
pub fn runtime_is_self(configured: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    if configured.is_empty() {
        return false;
    }
    let p = Path::new(configured);
    if matches!(
        p.file_name().and_then(|n| n.to_str()),
        Some("gpu-guard-runtime" | "gpu-guard")
    ) {
        return true;
    }
    let candidates: Vec<PathBuf> = if configured.contains('/') {
        vec![p.to_path_buf()]
    } else {
        let path = std::env::var_os("PATH").unwrap_or_else(|| {
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
        });
        std::env::split_paths(&path)
            .map(|d| d.join(configured))
            .collect()
    };
    let Ok(me) = std::fs::metadata("/proc/self/exe") else {
        return false;
    };
    candidates
        .iter()
        .filter_map(|c| std::fs::metadata(c).ok())
        .find(|m| m.is_file())
        .is_some_and(|m| m.dev() == me.dev() && m.ino() == me.ino())
}

/// The line `gpu-guard host` and `check` print about the chained runtime:
/// `chained runtime: PATH (from FILE)`; `None` when runtime.path is unset.
pub fn chained_runtime_line(l: &Loaded) -> Option<String> {
    if l.config.runtime.path.is_empty() {
        return None;
    }
    let from = l
        .runtime_path_from
        .as_ref()
        .map(|p| format!(" (from {})", p.display()))
        .unwrap_or_default();
    Some(format!("chained runtime: {}{from}", l.config.runtime.path))
}

/// The line `gpu-guard host` and `check` print about the drop-ins merged
/// over the main file, in the order applied:
/// `config drop-ins merged: PATH, PATH`; `None` when there were none.
pub fn drop_ins_line(l: &Loaded) -> Option<String> {
    if l.drop_ins.is_empty() {
        return None;
    }
    let list: Vec<String> = l
        .drop_ins
        .iter()
        .map(|p| crate::core::sanitize::esc(&p.display().to_string()))
        .collect();
    Some(format!("config drop-ins merged: {}", list.join(", ")))
}

/// Parses and validates config text; the error is one line naming the key.
pub fn parse(text: &str) -> Result<Config, String> {
    parse_content(&comments::content(text))
}

/// [`parse`] on the lines of a file that can mean something.
fn parse_content(text: &comments::Content) -> Result<Config, String> {
    let cfg = parse_unvalidated(text)?;
    cfg.validate()?;
    validate_globs(&cfg)?;
    Ok(cfg)
}

fn parse_unvalidated(text: &comments::Content) -> Result<Config, String> {
    let de = toml::Deserializer::parse(text.text()).map_err(|e| one_line_toml_error(text, &e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = one_line_toml_error(text, &inner);
        if path.is_empty() || path == "." {
            msg
        } else {
            format!("key `{path}`: {msg}")
        }
    })
}

/// toml errors span several lines with a source excerpt; we want one line
/// with the file's line number.
fn one_line_toml_error(content: &comments::Content, e: &toml::de::Error) -> String {
    let msg = e.message().trim().replace('\n', " ");
    let text = content.text();
    match e.span() {
        Some(span) => {
            let before = &text.as_bytes()[..span.start.min(text.len())];
            let line = content.file_line(before.iter().filter(|&&b| b == b'\n').count() + 1);
            format!("line {line}: {msg}")
        }
        None => msg,
    }
}

/// The library globs, which the core cannot parse (the glob language is the
/// rootfs walker's).
fn validate_globs(cfg: &Config) -> Result<(), String> {
    // Expanding and compiling the globs is most of the cost of loading
    // the config, which every container start pays, non-GPU ones too.
    // The shipped globs are checked by a test (shipped_globs_are_valid),
    // so only an admin's own list is checked here.
    if cfg.kernel_image.libraries != default_kernel_image_libraries() {
        for (i, g) in cfg.kernel_image.libraries.iter().enumerate() {
            crate::scan::glob::parse(g)
                .map_err(|e| format!("key `kernel_image.libraries[{i}]`: {e}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::Mode;

    #[test]
    fn shipped_file_parses_validates_and_is_default() {
        let shipped = parse(SHIPPED_CONFIG).expect("shipped config must be valid");
        assert_eq!(shipped, Config::default());
        assert_eq!(shipped.mode, Mode::Enforce);
        assert_eq!(shipped.host.facts_file, "");
        assert_eq!(shipped.host.nvml_library, "");
    }

    #[test]
    fn shipped_globs_are_valid() {
        for g in default_kernel_image_libraries() {
            crate::scan::glob::parse(&g).unwrap_or_else(|e| panic!("{g}: {e}"));
        }
        // and a custom list is still checked
        let e = parse("[kernel_image]\nlibraries = [\"usr/{lib\"]\n").unwrap_err();
        assert!(e.contains("kernel_image.libraries[0]"), "{e}");
    }

    #[test]
    fn errors_name_the_files_line_past_comments_and_blank_lines() {
        let text = "# a comment\n\n[host]\n  # another\n\nprobe_timeout_ms = \"soon\"\n";
        let e = parse(text).unwrap_err();
        assert!(e.starts_with("key `host.probe_timeout_ms`: line 6:"), "{e}");
        let e = parse("# c\n\nmode = \"warn\"\n# d\n[host\n").unwrap_err();
        assert!(e.starts_with("line 5:"), "{e}");
    }

    #[test]
    fn empty_file_is_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.mode, Mode::Enforce);
        assert_eq!(c.host.probe_timeout_ms, 5000);
    }

    #[test]
    fn host_tuning_keys() {
        use crate::core::policy::{Limit, ShmSize};
        let c = parse(
            "[tuning]\nshm_size = \"1g\"\nstack = 67108864\n[metrics]\ntextfile = \"/var/lib/node_exporter/gpu-guard.prom\"\n[host]\ncdi_spec_dirs = []\n",
        )
        .unwrap();
        assert_eq!(c.tuning.shm_size, ShmSize::Bytes(1 << 30));
        assert_eq!(c.tuning.stack, Limit::Bytes(64 << 20));
        assert!(c.host.cdi_spec_dirs.is_empty());
        for (text, size) in [
            ("\"512m\"", 512 << 20),
            ("\"512MiB\"", 512 << 20),
            ("\"65536k\"", 64 << 20),
            ("\"2 GB\"", 2 << 30),
            ("1048576", 1 << 20),
            ("\"1048576\"", 1 << 20),
        ] {
            let c = parse(&format!("[tuning]\nshm_size = {text}\n")).unwrap();
            assert_eq!(c.tuning.shm_size, ShmSize::Bytes(size), "{text}");
        }
        assert_eq!(
            parse("[tuning]\nstack = \"unlimited\"\n")
                .unwrap()
                .tuning
                .stack,
            Limit::Unlimited
        );
        for (text, key) in [
            ("[tuning]\nshm_size = \"1q\"\n", "tuning.shm_size"),
            ("[tuning]\nshm_size = \"1.5g\"\n", "tuning.shm_size"),
            ("[tuning]\nshm_size = -1\n", "tuning.shm_size"),
            ("[tuning]\nshm_size = 0\n", "tuning.shm_size"),
            ("[tuning]\nstack = \"big\"\n", "tuning.stack"),
            (
                "[metrics]\ntextfile = \"gpu-guard.prom\"\n",
                "metrics.textfile",
            ),
            (
                "[metrics]\ntextfile = \"/var/lib/x/\"\n",
                "metrics.textfile",
            ),
            (
                "[host]\ncdi_spec_dirs = [\"etc/cdi\"]\n",
                "host.cdi_spec_dirs[0]",
            ),
            ("[metrics]\ntext_file = \"/x.prom\"\n", "text_file"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse("mode = \"loud\"\n").unwrap_err();
        assert!(e.contains("mode"), "{e}");
        let e = parse("[host]\nfacts_fil = \"x\"\n").unwrap_err();
        assert!(e.contains("facts_fil"), "{e}");
        let e = parse("[security]\ncapabilities = [\"CAP_NOPE\"]\n").unwrap_err();
        assert!(e.contains("security.capabilities[0]"), "{e}");
        let e = parse("[host]\nprobe_timeout_ms = 600001\n").unwrap_err();
        assert!(e.contains("host.probe_timeout_ms"), "{e}");
        assert!(parse("[host]\nprobe_timeout_ms = 600000\n").is_ok());
        let e = parse("[host]\nprobe_timeout_ms = \"soon\"\n").unwrap_err();
        assert!(e.contains("host.probe_timeout_ms"), "{e}");
        assert!(!e.contains('\n'));
    }
}
