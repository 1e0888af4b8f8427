//! Root's file writes (fsutil's atomic replace: the host facts cache, the
//! scan cache, install state, engine configs) against a user who can write
//! the directory and races them.
//!
//! The attack this pins down: the old writer stat()ed the target through a
//! symlink to copy its mode and chmod()ed its temp file by path, so a user
//! who could write the cache directory swapped names for symlinks while root
//! wrote, and root chmod'ed a root-owned binary to 4777. Now the temp file is
//! created O_EXCL|O_NOFOLLOW, its mode set with fchmod(2) on the fd, the old
//! mode read through an O_PATH|O_NOFOLLOW fd, and directories others can
//! write are refused for the caches and state.
//!
//! The race and the ownership tests need root (chown, setuid to nobody). CI
//! runs them as root and fails them without it; anywhere else they print
//! SKIP (tests/support) rather than pass silently.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpu_guard::core::facts::HostFacts;
use gpu_guard::host::cache;
use gpu_guard::sys::fsutil;

/// The unprivileged attacker: nobody/nogroup.
const NOBODY: u32 = 65534;

/// The shared rule: SKIP when not root, a failure under CI.
#[must_use]
fn require_root(test: &str) -> bool {
    crate::support::have_root(&format!(
        "{test} needs chown and a setuid child to play the unprivileged attacker \
         (sudo -E cargo test --test decide write_safety)"
    ))
}

use crate::support::TempDir as Tmp;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn set_mode(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

fn mkdir(p: &Path, m: u32) {
    std::fs::create_dir_all(p).unwrap();
    set_mode(p, m);
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
}

fn key() -> cache::CacheKey {
    cache::CacheKey {
        driver: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14\n".into(),
        boot_id: "b-1".into(),
        nvml_library: String::new(),
    }
}

fn facts() -> HostFacts {
    HostFacts {
        driver_version: Some("550.54.14".into()),
        cuda_driver_version: Some("12.4".into()),
        gpus: vec![],
        ..Default::default()
    }
}

/// A root-owned "binary" outside the attacker's directory.
fn victim(t: &Tmp) -> (PathBuf, Vec<u8>) {
    let dir = t.0.join("usr/bin");
    mkdir(&dir, 0o755);
    let v = dir.join("victim");
    let content = b"#!/bin/sh\necho the real binary\n".to_vec();
    std::fs::write(&v, &content).unwrap();
    set_mode(&v, 0o755);
    (v, content)
}

fn assert_victim_intact(v: &Path, content: &[u8], when: &str) {
    let m = std::fs::symlink_metadata(v).unwrap();
    assert!(m.is_file(), "{when}: victim is no longer a regular file");
    assert_eq!(
        m.mode() & 0o7777,
        0o755,
        "{when}: root changed the victim's mode (the symlink race won)"
    );
    assert_eq!(
        m.uid(),
        nix::unistd::geteuid().as_raw(),
        "{when}: victim's owner changed"
    );
    assert_eq!(
        std::fs::read(v).unwrap(),
        content,
        "{when}: victim's content changed"
    );
}

/// The attacker's loop, run as nobody in its own process (Command::uid
/// drops root's groups, gid and uid before exec). Over and over it:
/// - plants its own file, mode 04777, at the target (the mode the old writer
///   copied), then swaps the target for a symlink to the victim;
/// - replaces every dot-file in the directory (root's temp files) with a
///   symlink to the victim, so a chmod by path would land there.
///
/// Exits 3 if it is not nobody, 4 if it cannot open the directory; else it
/// runs until `secs` pass or it is killed.
const ATTACKER: &str = r#"
import os, sys, time
d, victim, secs, temps_only = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
if os.geteuid() != 65534:
    sys.exit(3)
try:
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
except OSError:
    sys.exit(4)
def swap_temps():
    for name in os.listdir(dfd):
        if name.startswith(".") and name not in (".", ".."):
            try:
                os.unlink(name, dir_fd=dfd)
                os.symlink(victim, name, dir_fd=dfd)
            except OSError:
                pass
end = time.monotonic() + secs
while time.monotonic() < end:
    if not temps_only:
        try:
            fd = os.open("plant", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
            os.fchmod(fd, 0o4777)
            os.close(fd)
            os.rename("plant", "host-facts.json", src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError:
            pass
        try:
            try:
                os.unlink("link", dir_fd=dfd)
            except OSError:
                pass
            os.symlink(victim, "link", dir_fd=dfd)
            os.rename("link", "host-facts.json", src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError:
            pass
    swap_temps()
"#;

fn attacker(dir: &Path, victim: &Path, secs: u32, temps_only: bool) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    std::process::Command::new("python3")
        .arg("-c")
        .arg(ATTACKER)
        .arg(dir)
        .arg(victim)
        .arg(secs.to_string())
        .arg(if temps_only { "1" } else { "0" })
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .expect("python3 runs the attacker (integration/setup.sh installs it)")
}

#[test]
fn root_writes_never_touch_a_symlinked_victim_under_race() {
    if !require_root("root_writes_never_touch_a_symlinked_victim_under_race") {
        return;
    }
    let t = Tmp::new("race");
    let (victim, content) = victim(&t);
    // The cache directory belongs to the attacker.
    let dir = t.0.join("cache");
    mkdir(&dir, 0o755);
    chown(&dir, NOBODY);
    let target = dir.join("host-facts.json");

    // Two attackers (one on the temp files alone), so the swaps keep up with
    // root's writes.
    let mut children: Vec<_> = [false, true]
        .into_iter()
        .map(|temps_only| attacker(&dir, &victim, 60, temps_only))
        .collect();
    // Give the interpreters time to start racing.
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let (mut writes, mut swaps_seen) = (0u32, 0u32);
    let mut failure = None;
    while start.elapsed() < Duration::from_secs(30) {
        // A config-sized payload: the write takes long enough for the
        // attacker to get in between create and chmod, as it did.
        let mut data = format!("{{\"write\":{writes}}}").into_bytes();
        data.resize(64 * 1024, b' ');
        let data = data.as_slice();
        // Every entry point of the writer, as the callers use them.
        let _ = match writes % 4 {
            0 => fsutil::replace_file(&target, data, 0o644),
            1 => fsutil::write_with_mode(&target, data, 0o600, false),
            2 => fsutil::atomic_write(&target, data, 0o600),
            _ => fsutil::write_with_mode(&target, data, 0o600, true),
        };
        writes += 1;
        if let Err(e) = std::panic::catch_unwind(|| {
            assert_victim_intact(&victim, &content, &format!("after write {writes}"))
        }) {
            failure = Some(e);
            break;
        }
        if let Ok(m) = std::fs::symlink_metadata(&target) {
            if m.file_type().is_symlink() || m.uid() == NOBODY {
                swaps_seen += 1;
            }
        }
        if writes >= 400 && swaps_seen >= 20 && start.elapsed() > Duration::from_secs(4) {
            break;
        }
    }
    let statuses: Vec<_> = children
        .iter_mut()
        .map(|child| {
            // Still running means it raced the whole time; an exit before
            // the kill is a failed attacker (3: not nobody, 4: no dir).
            let early = child.try_wait().unwrap();
            let _ = child.kill();
            let _ = child.wait();
            early
        })
        .collect();
    if let Some(e) = failure {
        std::panic::resume_unwind(e);
    }
    for status in statuses {
        assert!(
            status.is_none(),
            "an attacker stopped before the end (exit 3: cannot become nobody, 4: cannot open the dir): {status:?}"
        );
    }
    assert!(
        swaps_seen > 0,
        "the attacker never raced the {writes} writes; the test proved nothing"
    );
    assert_victim_intact(&victim, &content, "at the end");
    // Nothing root wrote is setuid or copied the planted 04777.
    for e in std::fs::read_dir(&dir).unwrap() {
        let m = std::fs::symlink_metadata(e.unwrap().path()).unwrap();
        if m.uid() == 0 && m.is_file() {
            assert_eq!(m.mode() & 0o7000, 0, "root wrote a setuid/setgid file");
            assert_eq!(m.mode() & 0o022, 0, "root's file took the planted mode");
        }
    }
    // And the callers refuse this directory outright.
    let err = cache::store(&target, &key(), &facts(), "NVML", 1000).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("chown root {}", dir.display())),
        "{msg}"
    );
}

#[test]
fn directories_others_can_write_are_refused() {
    if !require_root("directories_others_can_write_are_refused") {
        return;
    }
    let t = Tmp::new("dirs");
    // Root's own 0755 directory is fine.
    let good = t.0.join("good");
    mkdir(&good, 0o755);
    fsutil::check_private_dir(&good).unwrap();

    // World- and group-writable: refused, one line naming dir, mode and fix.
    for m in [0o777, 0o770, 0o1777] {
        let d = t.0.join(format!("w{m:o}"));
        mkdir(&d, m);
        let e = fsutil::check_private_dir(&d).unwrap_err();
        let msg = e.to_string();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(!msg.contains('\n'), "{msg}");
        assert!(msg.contains(&d.display().to_string()), "{msg}");
        assert!(msg.contains(&format!("mode {m:04o}")), "{msg}");
        assert!(
            msg.contains(&format!("chmod 0700 {}", d.display())),
            "{msg}"
        );
        // The host cache is not written there; the scan cache is not used.
        let p = d.join("host-facts.json");
        assert!(matches!(
            cache::store(&p, &key(), &facts(), "NVML", 1000),
            Err(cache::CacheError::UnsafeDir(_))
        ));
        assert!(!p.exists());
        assert!(gpu_guard::scan::cache::Cache::open(d.to_str().unwrap()).is_none());
    }

    // Owned by someone else: refused with the chown fix.
    let theirs = t.0.join("theirs");
    mkdir(&theirs, 0o755);
    chown(&theirs, NOBODY);
    let msg = fsutil::check_private_dir(&theirs).unwrap_err().to_string();
    assert!(msg.contains("owner uid 65534"), "{msg}");
    assert!(
        msg.contains(&format!("chown root {}", theirs.display())),
        "{msg}"
    );
    assert!(gpu_guard::scan::cache::Cache::open(theirs.to_str().unwrap()).is_none());

    // A private directory inside one others can write (non-sticky): they
    // could rename it away and put their own in its place.
    let open = t.0.join("open");
    mkdir(&open, 0o777);
    let inner = open.join("inner");
    mkdir(&inner, 0o700);
    let msg = fsutil::check_private_dir(&inner).unwrap_err().to_string();
    assert!(msg.contains(&open.display().to_string()), "{msg}");
    // Sticky (as /tmp): others cannot rename ours, so it is fine.
    set_mode(&open, 0o1777);
    fsutil::check_private_dir(&inner).unwrap();
    // Reached through a link, the directories really walked through are
    // judged: here one that others can write.
    let open2 = t.0.join("open2");
    mkdir(&open2, 0o777);
    mkdir(&open2.join("inner"), 0o700);
    std::os::unix::fs::symlink(&open2, t.0.join("via")).unwrap();
    let msg = fsutil::check_private_dir(&t.0.join("via/inner"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains(&open2.display().to_string()), "{msg}");
    let msg = fsutil::check_private_dir(&t.0.join("open/../open2/inner"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("open2 (mode 0777"), "{msg}");

    // The directory itself a symlink: refused.
    let link = t.0.join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let msg = fsutil::check_private_dir(&link).unwrap_err().to_string();
    assert!(msg.contains("symlink"), "{msg}");

    // A fresh cache directory is created private and used.
    let fresh = t.0.join("run/gpu-guard/host-facts.json");
    cache::store(&fresh, &key(), &facts(), "NVML", 1000).unwrap();
    assert!(cache::load(&fresh, &key(), 300, 2000).is_ok());
}

#[test]
fn a_symlink_at_the_target_is_replaced_not_followed() {
    let t = Tmp::new("symlink");
    let (victim, content) = victim(&t);
    let dir = t.0.join("cache");
    mkdir(&dir, 0o755);
    let writers: [fn(&Path) -> std::io::Result<()>; 2] = [
        |p| fsutil::replace_file(p, b"new", 0o640),
        |p| fsutil::atomic_write(p, b"new", 0o640),
    ];
    for (i, write) in writers.iter().enumerate() {
        let target = dir.join(format!("c{i}.json"));
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        write(&target).unwrap();
        let m = std::fs::symlink_metadata(&target).unwrap();
        assert!(m.is_file(), "the link itself is replaced by a file");
        // The link's target's 0755 is not taken: the default applies.
        assert_eq!(m.mode() & 0o7777, 0o640);
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_victim_intact(&victim, &content, "after replacing a link to it");
    }
    // A dangling link is replaced too (not created through).
    let dangling = dir.join("dangling");
    let nowhere = t.0.join("nowhere");
    std::os::unix::fs::symlink(&nowhere, &dangling).unwrap();
    fsutil::replace_file(&dangling, b"x", 0o600).unwrap();
    assert!(!nowhere.exists());
    assert!(std::fs::symlink_metadata(&dangling).unwrap().is_file());
}

#[test]
fn setuid_setgid_and_sticky_bits_are_never_copied() {
    let t = Tmp::new("suid");
    let p = t.0.join("conf");
    std::fs::write(&p, b"old").unwrap();
    set_mode(&p, 0o7755);
    fsutil::atomic_write(&p, b"new", 0o600).unwrap();
    assert_eq!(mode(&p), 0o755);
    set_mode(&p, 0o4640);
    fsutil::replace_file(&p, b"newer", 0o600).unwrap();
    assert_eq!(mode(&p), 0o640);
    // Not even when asked for.
    fsutil::write_with_mode(&p, b"x", 0o4755, false).unwrap();
    assert_eq!(mode(&p), 0o755);
    // The old mode is still kept as before (engine configs keep theirs).
    set_mode(&p, 0o604);
    fsutil::atomic_write(&p, b"y", 0o600).unwrap();
    assert_eq!(mode(&p), 0o604);
    assert_eq!(std::fs::read(&p).unwrap(), b"y");
}

#[test]
fn a_world_writable_cache_is_healed_to_0600() {
    let t = Tmp::new("heal");
    let p = t.0.join("run/host-facts.json");
    cache::store(&p, &key(), &facts(), "NVML", 1000).unwrap();
    assert_eq!(mode(&p), 0o600);
    // Found 0666 (an old version, an admin's chmod): never trusted...
    set_mode(&p, 0o666);
    assert!(matches!(
        cache::load(&p, &key(), 300, 2000),
        Err(cache::Miss::Untrusted { .. })
    ));
    // ...and the next store (after the NVML probe) rewrites it 0600, so the
    // start after that is a hit again instead of NVML forever.
    cache::store(&p, &key(), &facts(), "NVML", 1000).unwrap();
    assert_eq!(mode(&p), 0o600);
    assert!(cache::load(&p, &key(), 300, 2000).is_ok());
}
