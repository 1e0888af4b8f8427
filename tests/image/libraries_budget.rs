//! The libraries scan's budgets hold on every path, through the real
//! binary on a cold cache: the prestart hook, the runtime wrapper and
//! `check --image` over hostile trees (a `DT_NEEDED` chain thousands deep,
//! many programs sharing it, an ld.so.conf that includes itself, an
//! include glob through symlinks to `/`). Each run is bounded in time (the
//! child is killed past [`LIMIT`]) and in peak memory (its `VmHWM`, read
//! while it runs): bounds that only catch a blow-up, the figures are
//! integration/bench-libraries-hostile.sh's. A scan that stops early says
//! so in the decision, and a scan that could not run at all is judged by
//! the same `on_incomplete` rule.

use crate::libraries_scan::{elf_needing, layer, Entry};
use crate::support::tempdir;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A run past this is a hang.
const LIMIT: Duration = Duration::from_secs(60);
/// Peak memory past this is a blow-up (the fixed scans take tens of MiB).
const MAX_PEAK_KIB: u64 = 256 << 10;

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// An ELF shared object `dir/name` needing `needs` (no SONAME: the loader
/// and ldconfig go by its file name).
fn write_lib(dir: &Path, name: &str, needs: &[String]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), elf_needing(needs)).unwrap();
}

/// A rootfs whose /usr/local/lib (listed in ld.so.conf) holds `n`
/// libraries in a `DT_NEEDED` chain, named so that path order runs against
/// the chain (`libcu0NNNN.so` needs the one numbered one less), the last
/// one needing `libcudnn.so.9`, which the image lacks; and `tops` more GPU
/// libraries that each need the head of the chain.
fn chain_rootfs(tag: &str, n: usize, tops: usize) -> PathBuf {
    let r = tempdir(tag);
    let lib = r.join("usr/local/lib");
    std::fs::create_dir_all(r.join("etc")).unwrap();
    std::fs::write(r.join("etc/debian_version"), "12.0\n").unwrap();
    std::fs::write(r.join("etc/ld.so.conf"), "/usr/local/lib\n").unwrap();
    for k in 0..n {
        let needs = if k == 0 {
            names(&["libcudnn.so.9"])
        } else {
            vec![format!("libcu{:05}.so", k - 1)]
        };
        write_lib(&lib, &format!("libcu{k:05}.so"), &needs);
    }
    for t in 0..tops {
        write_lib(
            &lib,
            &format!("libcutop{t:04}.so"),
            &[format!("libcu{:05}.so", n - 1)],
        );
    }
    r
}

/// A GPU container's bundle over `rootfs`, already compliant with the
/// security policy (noNewPrivileges), so only the libraries decide.
fn bundle(base: &Path, rootfs: &Path) -> PathBuf {
    let b = base.join("bundle");
    std::fs::create_dir_all(&b).unwrap();
    let spec = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": { "args": ["true"], "cwd": "/", "env": ["NVIDIA_VISIBLE_DEVICES=all"],
                     "noNewPrivileges": true },
        "root": { "path": rootfs },
        "hooks": { "prestart": [ {
            "path": "/usr/bin/nvidia-container-runtime-hook",
            "args": ["nvidia-container-runtime-hook", "prestart"]
        } ] }
    });
    std::fs::write(b.join("config.json"), spec.to_string()).unwrap();
    b
}

/// A config: host facts from tests/data, no host cache, the kernel-image
/// scan off, `[libraries]` as given with a cold cache in `base`.
fn config(base: &Path, libraries: &str, extra: &str) -> PathBuf {
    let p = base.join("config.toml");
    let facts = crate::compat_support::data("hosts/h100x8.json");
    std::fs::write(
        &p,
        format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[libraries]\ncache_dir = \"{}\"\n{libraries}\n[log]\nsyslog = false\n{extra}",
            facts.display(),
            base.join("libcache").display()
        ),
    )
    .unwrap();
    p
}

/// What one run of the binary did.
struct Run {
    code: Option<i32>,
    out: String,
    err: String,
    took: Duration,
    peak_kib: u64,
}

/// The peak resident set (`VmHWM`) of a running process, in KiB.
fn vm_hwm(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    l.split_whitespace().nth(1)?.parse().ok()
}

/// Runs `gpu-guard ARGS` with `stdin`, watching its peak memory, killed
/// past [`LIMIT`].
fn run(args: &[&std::ffi::OsStr], stdin: &[u8]) -> Run {
    let started = Instant::now();
    let mut child = Command::new(crate::scan_support::gpu_guard())
        .args(args)
        .env_remove("GPU_GUARD_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let pid = child.id();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let readers = (
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut out, &mut s);
            s
        }),
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        }),
    );
    let mut peak = 0;
    let status = loop {
        if let Some(k) = vm_hwm(pid) {
            peak = peak.max(k);
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Run {
        code: status.code(),
        out: readers.0.join().unwrap(),
        err: readers.1.join().unwrap(),
        took: started.elapsed(),
        peak_kib: peak,
    }
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

/// The prestart hook on `bundle` under `config`.
fn hook(config: &Path, bundle: &Path, id: &str) -> Run {
    let state = format!(
        r#"{{"ociVersion":"1.0.2","id":"{id}","status":"creating","pid":4242,"bundle":"{}"}}"#,
        bundle.display()
    );
    let args = [
        os("--config"),
        config.as_os_str(),
        os("hook"),
        os("prestart"),
    ];
    run(&args, state.as_bytes())
}

/// `check --bundle B --json` on `config`'s host: the decision.
fn check(config: &Path, bundle: &Path) -> (Run, serde_json::Value) {
    let args = [
        os("--config"),
        config.as_os_str(),
        os("check"),
        os("--json"),
        os("--bundle"),
        bundle.as_os_str(),
    ];
    let r = run(&args, b"");
    let v = serde_json::from_str(&r.out).unwrap_or(serde_json::Value::Null);
    (r, v)
}

fn bounded(what: &str, r: &Run) {
    assert!(
        r.took < LIMIT,
        "{what}: killed after {:?} (peak {} KiB)",
        r.took,
        r.peak_kib
    );
    assert!(
        r.peak_kib < MAX_PEAK_KIB,
        "{what}: peak RSS {} KiB in {:?}",
        r.peak_kib,
        r.took
    );
}

/// A chain of 2,000 GPU libraries, each needing the next (on main: 100 s
/// and 1.8 GB in the prestart hook): judged as one program that loads the
/// whole chain, so the missing library at its end is found and named, the
/// scan complete, in a fraction of the budget.
#[test]
fn a_dt_needed_chain_thousands_deep_is_judged_once() {
    let r = chain_rootfs("libs-budget-chain", 2000, 0);
    let d = tempdir("libs-budget-chain-run");
    let b = bundle(&d, &r);
    let cfg = config(
        &d,
        "severity = \"enforce\"\non_incomplete = \"enforce\"\ntime_budget_ms = 30000",
        "",
    );
    let h = hook(&cfg, &b, "chain1");
    bounded("hook", &h);
    assert_eq!(h.code, Some(1), "{}", h.err);
    assert!(h.err.contains("libcudnn.so.9"), "{}", h.err);
    assert!(!h.err.contains("stopped early"), "{}", h.err);
    std::fs::remove_dir_all(d.join("libcache")).unwrap();
    let (c, v) = check(&cfg, &b);
    bounded("check", &c);
    let libs = &v["libraries"];
    assert_eq!(libs["judged"], 1, "{}", c.out);
    assert!(libs["incomplete"].is_null(), "{libs}");
    let m = &libs["missing"][0];
    assert_eq!(m["name"], "libcudnn.so.9", "{libs}");
    assert_eq!(m["needed_by"], "usr/local/lib/libcu00000.so", "{libs}");
    std::fs::remove_dir_all(&r).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

/// 300 programs that each load a 1,500-deep chain: past the time budget
/// the hook and the wrapper stop, and the decision names the unfinished
/// scan (refused under `on_incomplete = "enforce"`).
#[test]
fn programs_sharing_a_deep_chain_stop_at_the_time_budget() {
    let r = chain_rootfs("libs-budget-tops", 1500, 300);
    let d = tempdir("libs-budget-tops-run");
    let b = bundle(&d, &r);
    let runc = d.join("fake-runc");
    let ran = d.join("runtime-ran");
    std::fs::write(&runc, format!("#!/bin/sh\ntouch '{}'\n", ran.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&runc, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = config(
        &d,
        "severity = \"enforce\"\non_incomplete = \"enforce\"\ntime_budget_ms = 300",
        &format!("[runtime]\npath = \"{}\"\n", runc.display()),
    );
    let h = hook(&cfg, &b, "tops1");
    bounded("hook", &h);
    assert_eq!(h.code, Some(1), "{}", h.err);
    assert!(
        h.err.contains("the libraries scan stopped early"),
        "{}",
        h.err
    );
    assert!(h.err.contains("time budget"), "{}", h.err);
    // The wrapper: refused before the real runtime, the log naming why.
    std::fs::remove_dir_all(d.join("libcache")).ok();
    let log = d.join("runtime-log.json");
    let args = [
        os("--config"),
        cfg.as_os_str(),
        os("runtime"),
        os("--log"),
        log.as_os_str(),
        os("create"),
        os("--bundle"),
        b.as_os_str(),
        os("tops1"),
    ];
    let w = run(&args, b"");
    bounded("wrapper", &w);
    assert_ne!(w.code, Some(0), "{}", w.err);
    assert!(!ran.exists(), "a refused container reached the runtime");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("the libraries scan stopped early"), "{text}");
    // Without on_incomplete = "enforce": it starts, with the warning.
    let warn = config(
        &d,
        "severity = \"enforce\"\ntime_budget_ms = 300",
        &format!("[runtime]\npath = \"{}\"\n", runc.display()),
    );
    std::fs::remove_dir_all(d.join("libcache")).ok();
    let h = hook(&warn, &b, "tops2");
    bounded("hook (warn)", &h);
    // An unfinished scan alone never refuses now; a scan that got to the
    // bottom of the chain within the budget (a fast or idle machine) found
    // the library that is really missing, which refuses under "enforce".
    if h.code != Some(0) {
        assert_eq!(h.code, Some(1), "{}", h.err);
        assert!(h.err.contains("libcudnn.so.9: cannot open"), "{}", h.err);
        assert!(
            !h.err
                .contains("error [library] the libraries scan stopped early"),
            "{}",
            h.err
        );
    }
    std::fs::remove_dir_all(&r).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

/// An /etc/ld.so.conf that includes itself thousands of times is read
/// once (its last line names where the library the program needs is);
/// an include glob that reaches itself again through 16 symlinks to `/`
/// stops at its bound and the decision says ld.so.conf was not read whole.
#[test]
fn ld_so_conf_includes_stay_bounded_and_an_unread_part_is_named() {
    let r = tempdir("libs-budget-conf");
    std::fs::create_dir_all(r.join("etc")).unwrap();
    let conf = format!("{}/opt/cufoo/lib\n", "include ld.so.conf\n".repeat(3300));
    std::fs::write(r.join("etc/ld.so.conf"), conf).unwrap();
    write_lib(&r.join("opt/cufoo/lib"), "libcufoo.so.1", &[]);
    write_lib(
        &r.join("usr/local/lib"),
        "libcuapp.so",
        &names(&["libcufoo.so.1"]),
    );
    let d = tempdir("libs-budget-conf-run");
    let b = bundle(&d, &r);
    let cfg = config(
        &d,
        "severity = \"enforce\"\non_incomplete = \"enforce\"\ntime_budget_ms = 30000",
        "",
    );
    let (c, v) = check(&cfg, &b);
    bounded("check, self-include", &c);
    assert_eq!(c.code, Some(0), "{}{}", c.out, c.err);
    assert!(v["libraries"]["incomplete"].is_null(), "{}", c.out);
    assert_eq!(
        v["libraries"]["missing"],
        serde_json::json!([]),
        "{}",
        c.out
    );
    // The glob through links to `/`.
    std::fs::write(r.join("etc/ld.so.conf"), "include /*/*/*/*/*/*/*/*\n").unwrap();
    for k in 0..16 {
        std::os::unix::fs::symlink("/", r.join(format!("l{k}"))).unwrap();
    }
    std::fs::remove_dir_all(d.join("libcache")).ok();
    let h = hook(&cfg, &b, "conf1");
    bounded("hook, glob", &h);
    assert_eq!(h.code, Some(1), "{}", h.err);
    assert!(h.err.contains("ld.so.conf was not read whole"), "{}", h.err);
    std::fs::remove_dir_all(&r).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

/// A scan that cannot run at all (the rootfs is gone) is judged as an
/// unfinished one: refused under `severity = "enforce"` with
/// `on_incomplete = "enforce"` (on main it only warned), a warning under
/// the default `on_incomplete = "warn"`, as a partial scan is.
#[test]
fn a_scan_that_cannot_run_is_judged_as_an_unfinished_one() {
    let d = tempdir("libs-budget-norootfs");
    let b = bundle(&d, &d.join("no-such-rootfs"));
    let refuse = config(
        &d,
        "severity = \"enforce\"\non_incomplete = \"enforce\"",
        "",
    );
    let h = hook(&refuse, &b, "gone1");
    assert_eq!(h.code, Some(1), "{}", h.err);
    assert!(
        h.err.contains("[library] the libraries scan could not run"),
        "{}",
        h.err
    );
    let warn = config(&d, "severity = \"enforce\"", "");
    let h = hook(&warn, &b, "gone2");
    assert_eq!(h.code, Some(0), "{}", h.err);
    std::fs::remove_dir_all(&d).unwrap();
}

/// `check --image` over a layer holding the same hostile trees: the chain
/// judged once, the shared chains stopped by the time budget and named.
#[test]
fn check_image_holds_the_same_budgets() {
    for (tag, n, tops, budget, incomplete) in [
        ("libs-budget-img-chain", 2000, 0, 30_000, false),
        ("libs-budget-img-tops", 1500, 300, 300, true),
    ] {
        let r = chain_rootfs(tag, n, tops);
        let mut entries: Vec<Entry> = Vec::new();
        for top in ["etc", "usr"] {
            entries.push((top.to_string(), None, None));
            crate::libraries_scan::entries_of(&r, top, &mut entries);
        }
        let layout = crate::image_support::oci_layout(
            &format!("{tag}-oci"),
            &names(&["NVIDIA_VISIBLE_DEVICES=all"]),
            &[layer(&entries)],
        );
        let d = tempdir(&format!("{tag}-run"));
        let cfg = config(
            &d,
            &format!(
                "severity = \"enforce\"\non_incomplete = \"enforce\"\ntime_budget_ms = {budget}"
            ),
            "",
        );
        let args = [
            os("--config"),
            cfg.as_os_str(),
            os("check"),
            os("--json"),
            os("--image"),
            layout.as_os_str(),
        ];
        let c = run(&args, b"");
        bounded(tag, &c);
        assert_eq!(c.code, Some(1), "{tag}: {}{}", c.out, c.err);
        let v: serde_json::Value = serde_json::from_str(&c.out).unwrap();
        let libs = &v["libraries"];
        assert_eq!(libs["incomplete"].is_string(), incomplete, "{tag}: {libs}");
        if incomplete {
            let why = libs["incomplete"].as_str().unwrap();
            assert!(why.contains("time budget"), "{tag}: {why}");
        } else {
            assert_eq!(libs["judged"], 1, "{tag}: {libs}");
            assert_eq!(libs["missing"][0]["name"], "libcudnn.so.9", "{tag}: {libs}");
        }
        for p in [&r, &d, &layout] {
            std::fs::remove_dir_all(p).unwrap();
        }
    }
}
