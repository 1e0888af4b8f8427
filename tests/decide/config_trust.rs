//! The config and its drop-ins are policy: each file, the
//! config's directory, `config.d` and every directory on the way must be
//! changeable only by root (or the effective uid), and a `*.toml` drop-in
//! that cannot be read as a regular file is an error naming it, never a
//! file skipped. docs/configuration.md and docs/interfaces.md state the
//! rules these tests hold.
//!
//! The classes that need another owner (`nobody`, uid 65534) need root to
//! chown; without root they print SKIP (a failure under GPU_GUARD_CI=1).

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use gpu_guard::config::{self, ConfigError, Loaded};
use gpu_guard::core::policy::Mode;

static BIN: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::support::gpu_guard);
const NOBODY: u32 = 65534;

struct Tmp(PathBuf);
impl Tmp {
    /// A fresh directory with `config.toml` (enforce) and `config.d/` holding
    /// `50-warn.toml`: the earlier drop-in a broken later one must not leave
    /// in force.
    fn new(name: &str) -> Tmp {
        let p = crate::support::tempdir(&format!("trust-{name}"));
        fs::create_dir_all(p.join("config.d")).unwrap();
        set_mode(&p, 0o755);
        set_mode(&p.join("config.d"), 0o755);
        let facts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/a100.json");
        write(
            &p.join("config.toml"),
            &format!(
                "mode = \"enforce\"\n[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[log]\nsyslog = false\n",
                facts.display()
            ),
        );
        write(&p.join("config.d/50-warn.toml"), "mode = \"warn\"\n");
        Tmp(p)
    }
    fn main(&self) -> PathBuf {
        self.0.join("config.toml")
    }
    fn drop_in(&self, name: &str) -> PathBuf {
        self.0.join("config.d").join(name)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn write(p: &Path, text: &str) {
    fs::write(p, text).unwrap();
    set_mode(p, 0o644);
}

fn set_mode(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(p: &Path, uid: u32) {
    nix::unistd::chown(p, Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
}

/// Whether this process can hand files to another owner; prints SKIP when
/// not (and fails under GPU_GUARD_CI=1, where every test must run).
fn can_chown(test: &str) -> bool {
    crate::support::have_root(&format!("{test} chowns files to nobody"))
}

/// Loads with a deadline: a FIFO or /dev/zero must never make it hang.
fn load(main: &Path) -> Result<Loaded, ConfigError> {
    let main = main.to_path_buf();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(config::load_detailed(Some(&main)));
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("loading the config hung")
}

/// The load fails, naming `path`, with every word of `words` in the message.
fn refused(t: &Tmp, path: &Path, words: &[&str]) -> ConfigError {
    let e = match load(&t.main()) {
        Ok(l) => panic!(
            "{} was accepted: mode {:?}, drop-ins {:?}",
            path.display(),
            l.config.mode,
            l.drop_ins
        ),
        Err(e) => e,
    };
    let msg = e.to_string();
    assert_eq!(e.path, path, "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    for w in words {
        assert!(msg.contains(w), "missing {w:?}: {msg}");
    }
    assert!(!msg.contains('\n'), "{msg}");
    e
}

fn gg(config: &Path, args: &[&str], stdin: &[u8]) -> (i32, String, Vec<u8>) {
    use std::io::Write;
    let mut child = Command::new(*BIN)
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("GPU_GUARD_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let o = child.wait_with_output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.stdout,
    )
}

/// The hook refuses a GPU container under the broken drop-in and names the
/// file; a container without GPUs still starts unchanged.
fn hook_refuses_gpu_containers(t: &Tmp, path: &Path) {
    let gpu = br#"{"ociVersion":"1.0.2","process":{"env":["NVIDIA_VISIBLE_DEVICES=all"]},"hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}]}}"#;
    let (code, err, out) = gg(&t.main(), &["hook", "precreate"], gpu);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    assert!(err.contains(&path.display().to_string()), "{err}");
    let plain = br#"{"ociVersion":"1.0.2","process":{"env":["PATH=/bin"]}}"#;
    let (code, err, out) = gg(&t.main(), &["hook", "precreate"], plain);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, plain);
}

#[test]
fn a_trusted_tree_loads_and_the_later_drop_in_wins() {
    let t = Tmp::new("ok");
    write(&t.drop_in("60-enforce.toml"), "mode = \"enforce\"\n");
    let l = load(&t.main()).unwrap();
    assert_eq!(l.config.mode, Mode::Enforce);
    assert_eq!(
        l.drop_ins,
        vec![t.drop_in("50-warn.toml"), t.drop_in("60-enforce.toml")]
    );
}

#[test]
fn a_drop_in_owned_by_nobody_is_refused() {
    if !can_chown("a_drop_in_owned_by_nobody_is_refused") {
        return;
    }
    let t = Tmp::new("nobody");
    let p = t.drop_in("60-off.toml");
    write(&p, "mode = \"off\"\n");
    chown(&p, NOBODY);
    refused(
        &t,
        &p,
        &["owned by another user", "uid 65534", "chown root"],
    );
    hook_refuses_gpu_containers(&t, &p);
}

#[test]
fn a_drop_in_writable_by_others_is_refused() {
    let t = Tmp::new("0666");
    let p = t.drop_in("60-off.toml");
    write(&p, "mode = \"off\"\n");
    set_mode(&p, 0o666);
    refused(
        &t,
        &p,
        &["writable by group or others", "mode 0666", "chmod go-w"],
    );
    set_mode(&p, 0o664);
    refused(&t, &p, &["writable by group or others"]);
    hook_refuses_gpu_containers(&t, &p);
}

#[test]
fn a_world_writable_config_d_is_refused_sticky_or_not() {
    let t = Tmp::new("1777");
    let dir = t.0.join("config.d");
    write(&t.drop_in("60-off.toml"), "mode = \"off\"\n");
    for mode in [0o1777, 0o777, 0o775] {
        set_mode(&dir, mode);
        refused(
            &t,
            &dir,
            &["refusing directory", "writable by group or others"],
        );
    }
    set_mode(&dir, 0o1777);
    hook_refuses_gpu_containers(&t, &dir);
    if can_chown("a_world_writable_config_d_is_refused_sticky_or_not") {
        // What anyone could put in a 1777 config.d: their own file.
        set_mode(&dir, 0o755);
        chown(&t.drop_in("60-off.toml"), NOBODY);
        refused(&t, &t.drop_in("60-off.toml"), &["owned by another user"]);
        // A config.d owned by someone else.
        chown(&t.drop_in("60-off.toml"), 0);
        chown(&dir, NOBODY);
        refused(&t, &dir, &["owned by another user"]);
    }
}

#[test]
fn a_dangling_symlink_drop_in_is_an_error_not_skipped() {
    let t = Tmp::new("dangling");
    let p = t.drop_in("60-enforce.toml");
    symlink(t.0.join("gone/60-enforce.toml"), &p).unwrap();
    let e = refused(&t, &p, &["cannot read it", "points to nothing"]);
    assert!(e.unreadable);
    hook_refuses_gpu_containers(&t, &p);
}

#[test]
fn a_fifo_drop_in_is_an_error_and_does_not_block() {
    let t = Tmp::new("fifo");
    let p = t.drop_in("60-enforce.toml");
    nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    refused(&t, &p, &["not a regular file", "FIFO"]);
    hook_refuses_gpu_containers(&t, &p);
}

#[test]
fn a_symlink_to_dev_zero_is_an_error_and_does_not_hang() {
    let t = Tmp::new("zero");
    let p = t.drop_in("60-enforce.toml");
    symlink("/dev/zero", &p).unwrap();
    refused(&t, &p, &["not a regular file", "character device"]);
    hook_refuses_gpu_containers(&t, &p);
}

#[test]
fn an_oversized_drop_in_is_an_error() {
    let t = Tmp::new("big");
    let p = t.drop_in("60-enforce.toml");
    write(&p, "");
    // Sparse: 4 GiB announced, nothing written; refused by its size alone.
    fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    refused(&t, &p, &["larger than 1048576 bytes"]);
    fs::write(&p, vec![b'#'; (1 << 20) + 1]).unwrap();
    refused(&t, &p, &["larger than 1048576 bytes"]);
}

#[test]
fn the_main_file_and_its_directory_follow_the_same_rule() {
    let t = Tmp::new("main");
    set_mode(&t.main(), 0o666);
    refused(&t, &t.main(), &["writable by group or others"]);
    set_mode(&t.main(), 0o644);
    // A directory others may write (not sticky): they could swap the file.
    set_mode(&t.0, 0o777);
    refused(
        &t,
        &t.main(),
        &["its directory", "writable by group or others"],
    );
    set_mode(&t.0, 0o755);
    // A FIFO as the main file: refused at once, not waited on.
    fs::remove_file(t.main()).unwrap();
    nix::unistd::mkfifo(&t.main(), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    refused(&t, &t.main(), &["not a regular file"]);
    if can_chown("the_main_file_and_its_directory_follow_the_same_rule") {
        fs::remove_file(t.main()).unwrap();
        write(&t.main(), "mode = \"off\"\n");
        chown(&t.main(), NOBODY);
        refused(&t, &t.main(), &["owned by another user"]);
        chown(&t.main(), 0);
        // An ancestor owned by another user could be renamed under us.
        let mid = t.0.join("mid");
        let sub = mid.join("sub");
        fs::create_dir_all(sub.join("config.d")).unwrap();
        write(&sub.join("config.toml"), "");
        chown(&mid, NOBODY);
        let e = config::load(Some(&sub.join("config.toml"))).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("owned by another user"), "{msg}");
        assert!(msg.contains(&format!("{} (mode", mid.display())), "{msg}");
        chown(&mid, 0);
        assert!(config::load(Some(&sub.join("config.toml"))).is_ok());
    }
}

#[test]
fn symlinks_are_followed_only_through_trusted_directories() {
    let t = Tmp::new("links");
    // A root-owned file in a root-owned directory, linked in: accepted
    // (configuration managers and NixOS-style /etc link their files).
    let store = t.0.join("store");
    fs::create_dir_all(&store).unwrap();
    set_mode(&store, 0o755);
    write(&store.join("real.toml"), "mode = \"enforce\"\n");
    let p = t.drop_in("60-enforce.toml");
    symlink(store.join("real.toml"), &p).unwrap();
    let l = load(&t.main()).unwrap();
    assert_eq!(l.config.mode, Mode::Enforce);
    assert!(l.drop_ins.contains(&p));
    // The same file in a directory anyone may write: refused, naming it.
    set_mode(&store, 0o777);
    refused(&t, &p, &["writable by group or others", "store"]);
    // A link to a directory is not a drop-in directory: an error.
    set_mode(&store, 0o755);
    fs::remove_file(&p).unwrap();
    symlink(&store, &p).unwrap();
    refused(&t, &p, &["not a regular file", "directory"]);
    // A real directory named *.toml is still not a drop-in (skipped).
    fs::remove_file(&p).unwrap();
    fs::create_dir(&p).unwrap();
    assert_eq!(load(&t.main()).unwrap().config.mode, Mode::Warn);
}

#[test]
fn a_config_in_a_sticky_directory_trusts_only_its_own_entries() {
    if !can_chown("a_config_in_a_sticky_directory_trusts_only_its_own_entries") {
        return;
    }
    // Like `--config /tmp/x.toml`: the file is ours and no one else can
    // rename or remove it, but anyone could create config.d beside it.
    let t = Tmp::new("sticky");
    fs::remove_dir_all(t.0.join("config.d")).unwrap();
    set_mode(&t.0, 0o1777);
    assert_eq!(load(&t.main()).unwrap().config.mode, Mode::Enforce);
    let planted = t.0.join("config.d");
    fs::create_dir(&planted).unwrap();
    set_mode(&planted, 0o755);
    write(&planted.join("50-off.toml"), "mode = \"off\"\n");
    chown(&planted, NOBODY);
    refused(&t, &planted, &["sticky", "not owned by root"]);
}

#[test]
fn check_and_host_name_the_merged_drop_ins() {
    let t = Tmp::new("show");
    write(&t.drop_in("60-enforce.toml"), "mode = \"enforce\"\n");
    let want = format!(
        "config drop-ins merged: {}, {}",
        t.drop_in("50-warn.toml").display(),
        t.drop_in("60-enforce.toml").display()
    );
    let (code, err, out) = gg(&t.main(), &["host"], b"");
    let out = String::from_utf8_lossy(&out);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&want), "{out}");
    let (code, err, out) = gg(
        &t.main(),
        &["check", "--env", "NVIDIA_VISIBLE_DEVICES=all"],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    assert!(String::from_utf8_lossy(&out).contains(&want), "{err}");
    let (_, _, out) = gg(
        &t.main(),
        &["check", "--json", "--env", "NVIDIA_VISIBLE_DEVICES=all"],
        b"",
    );
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert!(
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["check"] == "config"
                && f["severity"] == "info"
                && f["message"] == want.as_str()),
        "{v}"
    );
    // Without drop-ins: no line.
    fs::remove_dir_all(t.0.join("config.d")).unwrap();
    let (_, _, out) = gg(&t.main(), &["host"], b"");
    assert!(!String::from_utf8_lossy(&out).contains("drop-ins"));
}
