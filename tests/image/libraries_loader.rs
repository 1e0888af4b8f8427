//! The loader model against the real glibc loader.
//!
//! Each layout is a small rootfs written here: the host's own `ld.so`,
//! `libc.so.6` and `env` copied in, stub libraries built with the C
//! compiler (RPATH or RUNPATH, `$ORIGIN`, `$LIB`, `$PLATFORM`, glibc-hwcaps
//! directories, ld.so.conf and its includes, missing SONAME links, stale
//! caches, symlinks that loop or point out of the rootfs, files of another
//! machine, text where a library should be). A GPU layout is then started
//! as NVIDIA's stack starts a container: stand-ins for the driver libraries
//! of its capabilities are put in `/usr/lib/x86_64-linux-gnu` and the
//! host's ldconfig is rerun in the rootfs (`ldconfig -r`, as
//! libnvidia-container's `nvc_ldcache.c` runs it). The oracle is the real
//! loader, chrooted into the layout: `LD_TRACE_LOADED_OBJECTS=1 ld.so
//! ROOT` prints every object it loads, in order, with the path it found
//! or "not found", and stops with "error while loading shared libraries"
//! when it cannot go on. The model (`scan::ldso::trace_rootfs`) must say
//! exactly the same, line for line. Where a layout's root is a GPU
//! library or needs one, `gpu-guard scan --rootfs --libraries --json` is
//! run on it too, and its tree must find what the loader found.
//!
//! Needs root (chroot), gcc and ldconfig: without them it prints SKIP, and
//! fails under GPU_GUARD_CI=1 (support::skip_or_fail).

use gpu_guard::core::driver_libs::{self, DRIVER_LIBS};
use gpu_guard::scan::ldso::resolve::Trace;
use gpu_guard::scan::ldso::trace_rootfs;
use gpu_guard::scan::ldso::StartEnv;
use std::path::{Path, PathBuf};
use std::process::Command;

const DRIVER: &str = "580.65.06";
const T: &str = "x86_64-linux-gnu";

use crate::support::{have_root, have_tool};

fn host_file(candidates: &[&str]) -> Option<PathBuf> {
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .map(|p| std::fs::canonicalize(p).unwrap())
}

/// What one layout is made of, in order.
enum Op {
    /// A stub library: path, SONAME, libraries it links (paths in the
    /// layout; `rel:` links by a relative path from the root), RPATH,
    /// RUNPATH, `-z nodefaultlib`.
    Lib {
        path: &'static str,
        soname: Option<&'static str>,
        needs: Vec<&'static str>,
        rpath: Option<&'static str>,
        runpath: Option<&'static str>,
        nodeflib: bool,
    },
    Link(&'static str, &'static str),
    Rm(&'static str),
    Text(&'static str, &'static str),
    Mkdir(&'static str),
    /// Makes a library one of another machine (aarch64).
    Machine(&'static str),
}

fn lib(path: &'static str, soname: &'static str, needs: &[&'static str]) -> Op {
    Op::Lib {
        path,
        soname: Some(soname),
        needs: needs.to_vec(),
        rpath: None,
        runpath: None,
        nodeflib: false,
    }
}

fn lib_rpath(
    path: &'static str,
    soname: &'static str,
    needs: &[&'static str],
    rpath: &'static str,
) -> Op {
    Op::Lib {
        path,
        soname: Some(soname),
        needs: needs.to_vec(),
        rpath: Some(rpath),
        runpath: None,
        nodeflib: false,
    }
}

fn lib_runpath(
    path: &'static str,
    soname: &'static str,
    needs: &[&'static str],
    runpath: &'static str,
) -> Op {
    Op::Lib {
        path,
        soname: Some(soname),
        needs: needs.to_vec(),
        rpath: None,
        runpath: Some(runpath),
        nodeflib: false,
    }
}

struct Layout {
    name: &'static str,
    ops: Vec<Op>,
    root: &'static str,
    llp: Option<&'static str>,
    cwd: &'static str,
    /// None: not a GPU container (no injection, no ldconfig rerun).
    caps: Option<&'static str>,
    merged_usr: bool,
    /// Spot checks: (name, found?) lines the oracle must show, so each
    /// layout tests what it says it does.
    expect: Vec<(&'static str, bool)>,
}

fn layout(name: &'static str, ops: Vec<Op>, root: &'static str) -> Layout {
    Layout {
        name,
        ops,
        root,
        llp: None,
        cwd: "/",
        caps: Some("compute,utility"),
        merged_usr: false,
        expect: Vec::new(),
    }
}

impl Layout {
    fn llp(mut self, v: &'static str) -> Layout {
        self.llp = Some(v);
        self
    }
    fn cwd(mut self, v: &'static str) -> Layout {
        self.cwd = v;
        self
    }
    fn caps(mut self, v: Option<&'static str>) -> Layout {
        self.caps = v;
        self
    }
    fn merged(mut self) -> Layout {
        self.merged_usr = true;
        self
    }
    fn expect(mut self, name: &'static str, found: bool) -> Layout {
        self.expect.push((name, found));
        self
    }
}

struct Lab {
    work: PathBuf,
    ld_so: PathBuf,
    libc: PathBuf,
    env: PathBuf,
    stubs: PathBuf,
    n: std::cell::Cell<u32>,
}

impl Lab {
    fn new() -> Option<Lab> {
        if !have_root("the loader differential test chroots into its layouts") {
            return None;
        }
        if !["gcc", "ldconfig", "chroot"].into_iter().all(have_tool) {
            return None;
        }
        let ld_so = host_file(&[
            &format!("/lib/{T}/ld-linux-x86-64.so.2"),
            "/lib64/ld-linux-x86-64.so.2",
        ])?;
        let libc = host_file(&[&format!("/lib/{T}/libc.so.6")])?;
        let env = host_file(&["/usr/bin/env"])?;
        let work = crate::support::tempdir("ldso-diff");
        let lab = Lab {
            stubs: work.join("driver-stubs"),
            work,
            ld_so,
            libc,
            env,
            n: std::cell::Cell::new(0),
        };
        lab.build_driver_stubs();
        Some(lab)
    }

    fn gcc(
        &self,
        out: &Path,
        soname: Option<&str>,
        needs: &[PathBuf],
        extra: &[String],
        cwd: &Path,
    ) {
        let k = self.n.get();
        self.n.set(k + 1);
        let src = self.work.join(format!("s{k}.c"));
        std::fs::write(&src, format!("int gg_stub_{k}(void) {{ return {k}; }}\n")).unwrap();
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let mut cmd = Command::new("gcc");
        cmd.current_dir(cwd)
            .args(["-shared", "-fPIC", "-o"])
            .arg(out)
            .arg(&src)
            .arg("-Wl,--no-as-needed");
        if let Some(s) = soname {
            cmd.arg(format!("-Wl,-soname,{s}"));
        }
        cmd.args(needs).args(extra);
        let o = cmd.output().expect("gcc runs");
        assert!(
            o.status.success(),
            "gcc: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    fn build_driver_stubs(&self) {
        for l in DRIVER_LIBS {
            let out = self.stubs.join(l.file_name(DRIVER));
            self.gcc(&out, Some(&l.soname(DRIVER)), &[], &[], &self.work);
        }
    }

    fn base(&self, r: &Path, merged: bool) {
        let libdir = if merged {
            r.join(format!("usr/lib/{T}"))
        } else {
            r.join(format!("lib/{T}"))
        };
        std::fs::create_dir_all(&libdir).unwrap();
        std::fs::create_dir_all(r.join(format!("usr/lib/{T}"))).unwrap();
        std::fs::copy(&self.libc, libdir.join("libc.so.6")).unwrap();
        std::fs::copy(&self.ld_so, libdir.join("ld-linux-x86-64.so.2")).unwrap();
        if merged {
            std::os::unix::fs::symlink("usr/lib", r.join("lib")).unwrap();
            std::os::unix::fs::symlink("usr/lib64", r.join("lib64")).unwrap();
            std::fs::create_dir_all(r.join("usr/lib64")).unwrap();
            std::os::unix::fs::symlink(
                format!("../lib/{T}/ld-linux-x86-64.so.2"),
                r.join("usr/lib64/ld-linux-x86-64.so.2"),
            )
            .unwrap();
        } else {
            std::fs::create_dir_all(r.join("lib64")).unwrap();
            std::os::unix::fs::symlink(
                format!("/lib/{T}/ld-linux-x86-64.so.2"),
                r.join("lib64/ld-linux-x86-64.so.2"),
            )
            .unwrap();
        }
        std::fs::create_dir_all(r.join("usr/bin")).unwrap();
        std::fs::copy(&self.env, r.join("usr/bin/env")).unwrap();
        std::fs::create_dir_all(r.join("etc/ld.so.conf.d")).unwrap();
        std::fs::write(r.join("etc/debian_version"), "12.0\n").unwrap();
        std::fs::write(
            r.join("etc/ld.so.conf"),
            "include /etc/ld.so.conf.d/*.conf\n",
        )
        .unwrap();
        std::fs::write(
            r.join(format!("etc/ld.so.conf.d/{T}.conf")),
            format!("# multiarch support\n/usr/local/lib/{T}\n/lib/{T}\n/usr/lib/{T}\n"),
        )
        .unwrap();
    }

    fn apply(&self, r: &Path, op: &Op) {
        let at = |p: &str| r.join(p.trim_start_matches('/'));
        match op {
            Op::Lib {
                path,
                soname,
                needs,
                rpath,
                runpath,
                nodeflib,
            } => {
                let deps: Vec<PathBuf> = needs
                    .iter()
                    .map(|n| match n.strip_prefix("rel:") {
                        Some(rel) => PathBuf::from(rel),
                        None => at(n),
                    })
                    .collect();
                let mut extra = Vec::new();
                if let Some(rp) = rpath {
                    extra.push(format!("-Wl,--disable-new-dtags,-rpath,{rp}"));
                }
                if let Some(rp) = runpath {
                    extra.push(format!("-Wl,--enable-new-dtags,-rpath,{rp}"));
                }
                if *nodeflib {
                    extra.push("-Wl,-z,nodefaultlib".into());
                }
                self.gcc(&at(path), *soname, &deps, &extra, r);
            }
            Op::Link(p, target) => {
                std::fs::create_dir_all(at(p).parent().unwrap()).unwrap();
                std::os::unix::fs::symlink(target, at(p)).unwrap();
            }
            Op::Rm(p) => std::fs::remove_file(at(p)).unwrap(),
            Op::Text(p, text) => {
                std::fs::create_dir_all(at(p).parent().unwrap()).unwrap();
                std::fs::write(at(p), text).unwrap();
            }
            Op::Mkdir(p) => std::fs::create_dir_all(at(p)).unwrap(),
            Op::Machine(p) => {
                let mut b = std::fs::read(at(p)).unwrap();
                b[18..20].copy_from_slice(&183u16.to_le_bytes());
                std::fs::write(at(p), b).unwrap();
            }
        }
    }

    /// NVIDIA's start: the driver libraries in, ldconfig rerun.
    fn start_as_nvidia(&self, r: &Path, caps: &str) {
        let dir = r.join(format!("usr/lib/{T}"));
        let set = driver_libs::capabilities(Some(caps));
        for l in driver_libs::injected(&set) {
            let name = l.file_name(DRIVER);
            std::fs::copy(self.stubs.join(&name), dir.join(&name)).unwrap();
        }
        // libnvidia-container src/options.h: video brings the compute set.
        if driver_libs::library_sets(&set).contains(&driver_libs::Capability::Compute) {
            let _ = std::fs::remove_file(dir.join("libcuda.so"));
            std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
        }
        let o = Command::new("ldconfig")
            .arg("-r")
            .arg(r)
            .args(["-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache"])
            .arg(format!("/usr/lib/{T}"))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "ldconfig: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// The real loader's trace, chrooted into the layout.
fn oracle(r: &Path, l: &Layout) -> Trace {
    let mut cmd = Command::new("chroot");
    cmd.arg(r).args([
        "/usr/bin/env",
        "-i",
        "-C",
        l.cwd,
        "LD_TRACE_LOADED_OBJECTS=1",
    ]);
    if let Some(p) = l.llp {
        cmd.arg(format!("LD_LIBRARY_PATH={p}"));
    }
    cmd.args(["/lib64/ld-linux-x86-64.so.2", l.root]);
    let o = cmd.output().expect("chroot runs");
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    if let Some(at) = stderr.find("error while loading shared libraries: ") {
        let msg = stderr[at + "error while loading shared libraries: ".len()..].trim();
        return Trace {
            loaded: Vec::new(),
            fatal: Some(msg.to_string()),
        };
    }
    assert!(
        o.status.success() || !stderr.is_empty(),
        "{}: {stderr}",
        l.name
    );
    let mut loaded = Vec::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let line = line.trim();
        let (name, path) = if let Some((n, rest)) = line.split_once(" => ") {
            if rest == "not found" {
                (n.to_string(), None)
            } else {
                let p = rest.rsplit_once(" (").map(|(p, _)| p).unwrap_or(rest);
                (n.to_string(), Some(p.to_string()))
            }
        } else {
            let n = line.rsplit_once(" (").map(|(p, _)| p).unwrap_or(line);
            (n.to_string(), Some(n.to_string()))
        };
        if name == "linux-vdso.so.1" || name.ends_with("ld-linux-x86-64.so.2") {
            continue;
        }
        loaded.push((name, path));
    }
    Trace {
        loaded,
        fatal: None,
    }
}

/// The model names the same file and error as the loader (which, without
/// the C library's messages in the chroot, prints errno as `Error N`).
fn same_fatal(model: &str, real: &str) -> bool {
    let mut parts = model.splitn(3, ": ");
    let (path, what) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    real.starts_with(&format!("{path}: {what}"))
}

fn layouts() -> Vec<Layout> {
    use Op::*;
    let dep = |p| lib(p, "libdep.so.1", &[]);
    vec![
        layout("rpath-origin", vec![dep("opt/app/lib/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/app/lib/libdep.so.1"], "$ORIGIN")], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("runpath-origin", vec![dep("opt/app/lib/libdep.so.1"), lib_runpath("opt/app/lib/libroot.so", "libroot.so", &["opt/app/lib/libdep.so.1"], "$ORIGIN")], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("rpath-curly-dotdot", vec![dep("opt/app/dep/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/app/dep/libdep.so.1"], "${ORIGIN}/../dep")], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("rpath-inherited-by-dependencies", vec![lib("opt/app/dep/libleaf.so.1", "libleaf.so.1", &[]), lib("opt/app/dep/libmid.so.1", "libmid.so.1", &["opt/app/dep/libleaf.so.1"]), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/app/dep/libmid.so.1"], "$ORIGIN/../dep")], "/opt/app/lib/libroot.so").expect("libleaf.so.1", true),
        layout("runpath-not-inherited", vec![lib("opt/app/dep/libleaf.so.1", "libleaf.so.1", &[]), lib("opt/app/dep/libmid.so.1", "libmid.so.1", &["opt/app/dep/libleaf.so.1"]), lib_runpath("opt/app/lib/libroot.so", "libroot.so", &["opt/app/dep/libmid.so.1"], "$ORIGIN/../dep")], "/opt/app/lib/libroot.so").expect("libmid.so.1", true).expect("libleaf.so.1", false),
        layout("runpath-cuts-the-rpath-chain", vec![lib("opt/app/dep/libleaf.so.1", "libleaf.so.1", &[]), lib_runpath("opt/app/dep/libmid.so.1", "libmid.so.1", &["opt/app/dep/libleaf.so.1"], "/nowhere"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/app/dep/libmid.so.1"], "$ORIGIN/../dep")], "/opt/app/lib/libroot.so").expect("libleaf.so.1", false),
        layout("rpath-list-slashes-duplicates", vec![dep("opt/b/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/b/libdep.so.1"], "/nope:/opt/b/:/opt/b//:$ORIGIN/../c")], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("rpath-empty-element-is-cwd", vec![dep("work/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["work/libdep.so.1"], ":/nope")], "/opt/app/lib/libroot.so").cwd("/work").expect("libdep.so.1", true),
        layout("ld-so-conf-d", vec![dep("opt/cuda/lib64/libdep.so.1"), Text("etc/ld.so.conf.d/cuda.conf", "/opt/cuda/lib64\n"), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/cuda/lib64/libdep.so.1"])], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("ldconfig-creates-the-soname-link", vec![lib("opt/cuda/lib64/libdep.so.1.2.3", "libdep.so.1", &[]), Text("etc/ld.so.conf.d/cuda.conf", "/opt/cuda/lib64\n"), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/cuda/lib64/libdep.so.1.2.3"])], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("no-soname-link-in-an-rpath-dir", vec![lib("opt/app/lib/libdep.so.1.2.3", "libdep.so.1", &[]), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/app/lib/libdep.so.1.2.3"], "$ORIGIN")], "/opt/app/lib/libroot.so").expect("libdep.so.1", false),
        layout("not-a-gpu-container-keeps-no-cache", vec![dep(Box::leak(format!("usr/lib/{T}/libdep.so.1").into_boxed_str())), lib("opt/cuda/lib64/libconf.so.1", "libconf.so.1", &[]), Text("etc/ld.so.conf.d/cuda.conf", "/opt/cuda/lib64\n"), lib("opt/app/lib/libroot.so", "libroot.so", &[Box::leak(format!("usr/lib/{T}/libdep.so.1").into_boxed_str()), "opt/cuda/lib64/libconf.so.1"])], "/opt/app/lib/libroot.so").caps(None).expect("libdep.so.1", true).expect("libconf.so.1", false),
        layout("a-stale-shipped-cache-is-rebuilt", vec![dep("opt/cuda/lib64/libdep.so.1"), Text("etc/ld.so.conf.d/cuda.conf", "/opt/cuda/lib64\n"), Text("etc/ld.so.cache", "glibc-ld.so.cache1.1 stale garbage"), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/cuda/lib64/libdep.so.1"])], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("ld-library-path", vec![dep("opt/llp/libdep.so.1"), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/llp/libdep.so.1"])], "/opt/app/lib/libroot.so").llp("/opt/llp").expect("libdep.so.1", true),
        layout("ld-library-path-relative-to-cwd", vec![dep("work/lib/libdep.so.1"), lib("opt/app/lib/libroot.so", "libroot.so", &["work/lib/libdep.so.1"])], "/opt/app/lib/libroot.so").llp("lib").cwd("/work").expect("libdep.so.1", true),
        layout("ld-library-path-semicolons-and-empties", vec![dep("opt/llp/libdep.so.1"), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/llp/libdep.so.1"])], "/opt/app/lib/libroot.so").llp("/nope;;/opt/llp:").expect("libdep.so.1", true),
        layout("ld-library-path-origin-is-the-program's", vec![dep("opt/app/x/libdep.so.1"), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/app/x/libdep.so.1"])], "/opt/app/lib/libroot.so").llp("$ORIGIN/../x").expect("libdep.so.1", true),
        layout("symlink-out-of-the-rootfs-finds-nothing", vec![lib("opt/tmp/libz.so.1", "libz.so.1", &[]), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/tmp/libz.so.1"], "$ORIGIN"), Rm("opt/tmp/libz.so.1"), Link("opt/app/lib/libz.so.1", Box::leak(format!("/usr/lib/{T}/libz.so.1").into_boxed_str()))], "/opt/app/lib/libroot.so").expect("libz.so.1", false),
        layout("symlink-dotdot-clamped-at-the-root", vec![dep("opt/real/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/real/libdep.so.1"], "$ORIGIN/l"), Link("opt/app/lib/l/libdep.so.1", "../../../../../../../../opt/real/libdep.so.1")], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("symlink-loop-ends-the-search-path", vec![dep("opt/app/lib/b/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/app/lib/b/libdep.so.1"], "$ORIGIN/a:$ORIGIN/b"), Link("opt/app/lib/a/libdep.so.1", "libdep.so.1")], "/opt/app/lib/libroot.so").expect("libdep.so.1", false),
        layout("symlink-loop-then-ld-library-path", vec![dep("opt/app/lib/b/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/app/lib/b/libdep.so.1"], "$ORIGIN/a:$ORIGIN/b"), Link("opt/app/lib/a/libdep.so.1", "libdep.so.1")], "/opt/app/lib/libroot.so").llp("/opt/app/lib/b").expect("libdep.so.1", true),
        layout("another-machine-is-passed-over", vec![dep("opt/good/libdep.so.1"), dep("opt/app/lib/libdep.so.1"), Machine("opt/app/lib/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/good/libdep.so.1"], "$ORIGIN")], "/opt/app/lib/libroot.so").llp("/opt/good").expect("libdep.so.1", true),
        layout("only-another-machine", vec![dep("opt/app/lib/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/app/lib/libdep.so.1"], "$ORIGIN"), Machine("opt/app/lib/libdep.so.1")], "/opt/app/lib/libroot.so").expect("libdep.so.1", false),
        layout("text-where-a-library-should-be", vec![dep("opt/tmp/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/tmp/libdep.so.1"], "$ORIGIN"), Text("opt/app/lib/libdep.so.1", "INPUT(libdep.so.1)\nthis is not ELF, it is long enough to be read\n")], "/opt/app/lib/libroot.so"),
        layout("a-directory-named-like-a-library", vec![dep("opt/tmp/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/tmp/libdep.so.1"], "$ORIGIN"), Mkdir("opt/app/lib/libdep.so.1")], "/opt/app/lib/libroot.so"),
        layout("needed-by-relative-path", vec![Op::Lib { path: "opt/rel/librel.so", soname: None, needs: vec![], rpath: None, runpath: None, nodeflib: false }, lib("opt/app/lib/libroot.so", "libroot.so", &["rel:opt/rel/librel.so"])], "/opt/app/lib/libroot.so").expect("opt/rel/librel.so", true),
        layout("needed-by-relative-path-from-elsewhere", vec![Op::Lib { path: "opt/rel/librel.so", soname: None, needs: vec![], rpath: None, runpath: None, nodeflib: false }, lib("opt/app/lib/libroot.so", "libroot.so", &["rel:opt/rel/librel.so"])], "/opt/app/lib/libroot.so").cwd("/opt").expect("opt/rel/librel.so", false),
        layout("needed-with-origin-token", vec![lib("opt/app/lib/libsub.so", "$ORIGIN/libsub.so", &[]), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/app/lib/libsub.so"])], "/opt/app/lib/libroot.so"),
        layout("lib-token", vec![dep(Box::leak(format!("opt/lib/{T}/libdep.so.1").into_boxed_str())), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &[Box::leak(format!("opt/lib/{T}/libdep.so.1").into_boxed_str())], "/opt/$LIB")], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("platform-token", vec![dep("opt/haswell/libdep.so.1"), dep("opt/x86_64/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/x86_64/libdep.so.1"], "/opt/$PLATFORM")], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("glibc-hwcaps-in-an-rpath-dir", vec![dep("opt/app/lib/glibc-hwcaps/x86-64-v2/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/app/lib/glibc-hwcaps/x86-64-v2/libdep.so.1"], "$ORIGIN")], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("glibc-hwcaps-priority", vec![dep("opt/app/lib/glibc-hwcaps/x86-64-v2/libdep.so.1"), dep("opt/app/lib/glibc-hwcaps/x86-64-v3/libdep.so.1"), dep("opt/app/lib/libdep.so.1"), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/app/lib/libdep.so.1"], "$ORIGIN")], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("glibc-hwcaps-in-the-cache", vec![dep("opt/hw/glibc-hwcaps/x86-64-v2/libdep.so.1"), Text("etc/ld.so.conf.d/hw.conf", "/opt/hw\n"), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/hw/glibc-hwcaps/x86-64-v2/libdep.so.1"])], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("nodefaultlib-skips-system-dirs", vec![dep(Box::leak(format!("usr/lib/{T}/libdep.so.1").into_boxed_str())), Op::Lib { path: "opt/app/lib/libroot.so", soname: Some("libroot.so"), needs: vec![Box::leak(format!("usr/lib/{T}/libdep.so.1").into_boxed_str())], rpath: None, runpath: None, nodeflib: true }], "/opt/app/lib/libroot.so").expect("libdep.so.1", false),
        layout("nodefaultlib-keeps-other-cache-entries", vec![dep("opt/conf/libdep.so.1"), Text("etc/ld.so.conf.d/c.conf", "/opt/conf\n"), Op::Lib { path: "opt/app/lib/libroot.so", soname: Some("libroot.so"), needs: vec!["opt/conf/libdep.so.1"], rpath: None, runpath: None, nodeflib: true }], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("libcuda-injected-with-compute", vec![lib("opt/tmp/libcuda.so.1", "libcuda.so.1", &[]), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/tmp/libcuda.so.1"]), Rm("opt/tmp/libcuda.so.1")], "/opt/app/lib/libroot.so").caps(Some("compute")).expect("libcuda.so.1", true),
        // libnvidia-container src/options.h: `video` is OPT_VIDEO_LIBS|OPT_COMPUTE_LIBS,
        // `display` OPT_DISPLAY|OPT_GRAPHICS_LIBS (no compute set).
        layout("libcuda-injected-with-video", vec![lib("opt/tmp/libcuda.so.1", "libcuda.so.1", &[]), lib("opt/tmp/libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler.so.1", &[]), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/tmp/libcuda.so.1", "opt/tmp/libnvidia-ptxjitcompiler.so.1"]), Rm("opt/tmp/libcuda.so.1"), Rm("opt/tmp/libnvidia-ptxjitcompiler.so.1")], "/opt/app/lib/libroot.so").caps(Some("video")).expect("libcuda.so.1", true).expect("libnvidia-ptxjitcompiler.so.1", true),
        layout("libglx-injected-libcuda-missing-with-display", vec![lib("opt/tmp/libcuda.so.1", "libcuda.so.1", &[]), lib("opt/tmp/libGLX_nvidia.so.0", "libGLX_nvidia.so.0", &[]), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/tmp/libcuda.so.1", "opt/tmp/libGLX_nvidia.so.0"]), Rm("opt/tmp/libcuda.so.1"), Rm("opt/tmp/libGLX_nvidia.so.0")], "/opt/app/lib/libroot.so").caps(Some("display")).expect("libcuda.so.1", false).expect("libGLX_nvidia.so.0", true),
        layout("libcuda-missing-with-utility", vec![lib("opt/tmp/libcuda.so.1", "libcuda.so.1", &[]), lib("opt/tmp/libnvidia-ml.so.1", "libnvidia-ml.so.1", &[]), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/tmp/libcuda.so.1", "opt/tmp/libnvidia-ml.so.1"]), Rm("opt/tmp/libcuda.so.1"), Rm("opt/tmp/libnvidia-ml.so.1")], "/opt/app/lib/libroot.so").caps(Some("utility")).expect("libcuda.so.1", false).expect("libnvidia-ml.so.1", true),
        layout("the-image's-libcuda-stub-wins", vec![lib(Box::leak(format!("usr/lib/{T}/libcuda.so.1").into_boxed_str()), "libcuda.so.1", &[]), lib("opt/app/lib/libroot.so", "libroot.so", &[Box::leak(format!("usr/lib/{T}/libcuda.so.1").into_boxed_str())])], "/opt/app/lib/libroot.so").caps(Some("all")).expect("libcuda.so.1", true),
        layout("first-conf-dir-wins", vec![dep("opt/first/libdep.so.1"), dep("opt/second/libdep.so.1"), Text("etc/ld.so.conf.d/a.conf", "/opt/first\n/opt/second\n"), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/second/libdep.so.1"])], "/opt/app/lib/libroot.so").expect("libdep.so.1", true),
        layout("merged-usr-spellings", vec![dep("opt/cuda/libdep.so.1"), Text("etc/ld.so.conf.d/z.conf", "/opt/cuda\n"), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/cuda/libdep.so.1"])], "/opt/app/lib/libroot.so").merged().expect("libdep.so.1", true),
        layout("merged-usr-without-cache", vec![lib("opt/app/lib/libroot.so", "libroot.so", &[])], "/opt/app/lib/libroot.so").merged().caps(None),
        layout("breadth-first-order", vec![lib("opt/l/libc1.so.1", "libc1.so.1", &[]), lib("opt/l/libd1.so.1", "libd1.so.1", &[]), lib("opt/l/liba1.so.1", "liba1.so.1", &["opt/l/libc1.so.1", "opt/l/libd1.so.1"]), lib("opt/l/libb1.so.1", "libb1.so.1", &["opt/l/libd1.so.1", "opt/l/libc1.so.1"]), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/l/liba1.so.1", "opt/l/libb1.so.1"], "/opt/l")], "/opt/app/lib/libroot.so").expect("libd1.so.1", true),
        layout("one-file-two-names", vec![lib("opt/l/libalias.so.1", "libalias.so.1", &[]), lib("opt/l/libreal.so.1.0", "libreal.so.1", &[]), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/l/libalias.so.1", "opt/l/libreal.so.1.0"], "/opt/l"), Rm("opt/l/libalias.so.1"), Link("opt/l/libalias.so.1", "libreal.so.1.0"), Link("opt/l/libreal.so.1", "libreal.so.1.0")], "/opt/app/lib/libroot.so").expect("libalias.so.1", true),
        layout("dev-link-only", vec![lib("opt/d/libfoo.so.1.0", "libfoo.so.1", &[]), Link("opt/d/libfoo.so", "libfoo.so.1.0"), Text("etc/ld.so.conf.d/d.conf", "/opt/d\n"), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/d/libfoo.so.1.0"])], "/opt/app/lib/libroot.so").expect("libfoo.so.1", true),
        layout("conf-comments-relative-includes", vec![dep("opt/inc/libdep.so.1"), lib("opt/last/libdep2.so.1", "libdep2.so.1", &[]), Text("etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n  include   extra.d/*.conf # comment\n/opt/last/   \n"), Text("etc/extra.d/b.conf", "# nothing\n\n/opt/inc//\n"), Text("etc/extra.d/.hidden.conf", "/opt/hidden\n"), lib("opt/app/lib/libroot.so", "libroot.so", &["opt/inc/libdep.so.1", "opt/last/libdep2.so.1"])], "/opt/app/lib/libroot.so").expect("libdep.so.1", true).expect("libdep2.so.1", true),
        layout("transitive-miss", vec![lib("opt/tmp/libleaf.so.1", "libleaf.so.1", &[]), lib("opt/l/libmid.so.1", "libmid.so.1", &["opt/tmp/libleaf.so.1"]), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/l/libmid.so.1"], "/opt/l"), Rm("opt/tmp/libleaf.so.1")], "/opt/app/lib/libroot.so").expect("libleaf.so.1", false),
        layout("a-miss-asked-twice", vec![lib("opt/tmp/libleaf.so.1", "libleaf.so.1", &[]), lib("opt/l/libmid.so.1", "libmid.so.1", &["opt/tmp/libleaf.so.1"]), lib_rpath("opt/app/lib/libroot.so", "libroot.so", &["opt/tmp/libleaf.so.1", "opt/l/libmid.so.1"], "/opt/l"), Rm("opt/tmp/libleaf.so.1")], "/opt/app/lib/libroot.so").expect("libleaf.so.1", false),
        // GPU names: these roots are judged by `gpu-guard scan --rootfs
        // --libraries` too, which must agree with the loader.
        layout("gpu-rpath-origin", vec![lib("opt/w/nvidia/lib/libcudart.so.13", "libcudart.so.13", &[]), lib_rpath("opt/w/nvidia/lib/libcurand.so.10", "libcurand.so.10", &["opt/w/nvidia/lib/libcudart.so.13"], "$ORIGIN")], "/opt/w/nvidia/lib/libcurand.so.10").expect("libcudart.so.13", true),
        layout("gpu-runpath-not-inherited", vec![lib("opt/c/lib/libcublasLt.so.13", "libcublasLt.so.13", &[]), lib("opt/c/lib/libcublas.so.13", "libcublas.so.13", &["opt/c/lib/libcublasLt.so.13"]), lib_runpath("opt/app/lib/libapp.so", "libapp.so", &["opt/c/lib/libcublas.so.13"], "/opt/c/lib")], "/opt/app/lib/libapp.so").expect("libcublas.so.13", true).expect("libcublasLt.so.13", false),
        layout("gpu-rpath-inherited", vec![lib("opt/c/lib/libcublasLt.so.13", "libcublasLt.so.13", &[]), lib("opt/c/lib/libcublas.so.13", "libcublas.so.13", &["opt/c/lib/libcublasLt.so.13"]), lib_rpath("opt/app/lib/libapp.so", "libapp.so", &["opt/c/lib/libcublas.so.13"], "/opt/c/lib")], "/opt/app/lib/libapp.so").expect("libcublasLt.so.13", true),
        layout("gpu-ld-so-conf-d", vec![lib("opt/cudnn/lib/libcudnn.so.9.1.0", "libcudnn.so.9", &[]), Text("etc/ld.so.conf.d/cudnn.conf", "/opt/cudnn/lib\n"), lib("opt/app/lib/libapp.so", "libapp.so", &["opt/cudnn/lib/libcudnn.so.9.1.0"])], "/opt/app/lib/libapp.so").expect("libcudnn.so.9", true),
        layout("gpu-not-in-the-image", vec![lib("opt/tmp/libnccl.so.2", "libnccl.so.2", &[]), lib("opt/app/lib/libapp.so", "libapp.so", &["opt/tmp/libnccl.so.2"]), Rm("opt/tmp/libnccl.so.2")], "/opt/app/lib/libapp.so").expect("libnccl.so.2", false),
        layout("gpu-ld-library-path", vec![lib("opt/llp/libnvrtc.so.13", "libnvrtc.so.13", &[]), lib("opt/app/lib/libapp.so", "libapp.so", &["opt/llp/libnvrtc.so.13"])], "/opt/app/lib/libapp.so").llp("/opt/llp").expect("libnvrtc.so.13", true),
        layout("gpu-libcuda-with-utility-only", vec![lib("opt/tmp/libcuda.so.1", "libcuda.so.1", &[]), lib("opt/app/lib/libapp.so", "libapp.so", &["opt/tmp/libcuda.so.1"]), Rm("opt/tmp/libcuda.so.1")], "/opt/app/lib/libapp.so").caps(Some("utility")).expect("libcuda.so.1", false),
    ]
}

/// What one layout gave through the binary.
#[derive(PartialEq)]
enum Binary {
    NotRun,
    /// The root judged the same; `true` when only `dlopen` misses were
    /// found (which stay warnings under `enforce`: exit 0).
    Same {
        dlopen_only: bool,
    },
}

/// `gpu-guard scan --rootfs ROOT --libraries --json` under `[libraries]
/// severity = "enforce"`, started as the layout is (its LD_LIBRARY_PATH and
/// capabilities): where it judges the layout's root (a GPU library, or
/// one that needs one), each library its tree loads through DT_NEEDED must
/// be found, or not, as the real loader found it, and it exits 1 exactly
/// when a library it needs will not load (a `dlopen` miss is a warning).
/// Layouts the scan cannot start the same way (not a GPU container,
/// another working directory, a fatal loader error) are not run.
fn through_binary(lab: &Lab, r: &Path, l: &Layout, real: &Trace) -> Result<Binary, String> {
    let Some(caps) = l.caps else {
        return Ok(Binary::NotRun);
    };
    if l.cwd != "/" || real.fatal.is_some() {
        return Ok(Binary::NotRun);
    }
    let must = l.name.starts_with("gpu-") || l.name.contains("libcuda");
    let config = lab.work.join("scan-config.toml");
    std::fs::write(
        &config,
        "[libraries]\nseverity = \"enforce\"\ncache_dir = \"\"\n[log]\nsyslog = false\n",
    )
    .unwrap();
    let mut cmd = Command::new(crate::scan_support::gpu_guard());
    cmd.arg("--config")
        .arg(&config)
        .args(["scan", "--rootfs", "--libraries", "--json"]);
    cmd.arg(format!("--env=NVIDIA_DRIVER_CAPABILITIES={caps}"));
    if let Some(p) = l.llp {
        cmd.arg(format!("--env=LD_LIBRARY_PATH={p}"));
    }
    let o = cmd.arg(r).env_remove("GPU_GUARD_CONFIG").output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let name = l.name;
    let v: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| format!("{name}: {e}: {out}{err}"))?;
    let missing = v["rootfs"][0]["libraries"]["missing"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let hard = missing
        .iter()
        .any(|m| m["via"] == "DT_NEEDED" && m["optional"] != true);
    if o.status.code() != Some(i32::from(hard)) {
        return Err(format!(
            "{name}: scan exited {:?} with missing {missing:?}: {err}",
            o.status.code()
        ));
    }
    let Some(tree) = v["rootfs"][0]["trees"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["root"] == l.root)
    else {
        return if must {
            Err(format!("{name}: the binary judged no {}: {v}", l.root))
        } else {
            Ok(Binary::NotRun)
        };
    };
    let mut lines = 0;
    for line in tree["lines"].as_array().into_iter().flatten() {
        // The oracle's lines leave the loader itself out (`oracle`).
        if line["via"] != "DT_NEEDED" || line["name"] == "ld-linux-x86-64.so.2" {
            continue;
        }
        lines += 1;
        let lib = line["name"].as_str().unwrap_or("");
        let found = !line["path"].is_null();
        let oracle = real.loaded.iter().find(|(n, _)| n == lib);
        if oracle.map(|(_, p)| p.is_some()) != Some(found) {
            return Err(format!(
                "{name}: the binary's tree has {lib} {} where the loader says {oracle:?}: {tree}",
                if found { "found" } else { "not found" }
            ));
        }
    }
    if lines == 0 {
        return Err(format!("{name}: the binary's tree is empty: {tree}"));
    }
    Ok(Binary::Same {
        dlopen_only: !hard && missing.iter().any(|m| m["via"] == "dlopen"),
    })
}

#[test]
fn the_model_traces_what_the_real_loader_traces() {
    let Some(lab) = Lab::new() else { return };
    let all = layouts();
    let mut failures = Vec::new();
    let mut judged_by_binary = 0;
    let mut dlopen_warnings = 0;
    for (k, l) in all.iter().enumerate() {
        let r = lab.work.join(format!("root{k}"));
        std::fs::create_dir_all(&r).unwrap();
        lab.base(&r, l.merged_usr);
        for op in &l.ops {
            lab.apply(&r, op);
        }
        if let Some(c) = l.caps {
            lab.start_as_nvidia(&r, c);
        }
        let real = oracle(&r, l);
        for (name, found) in &l.expect {
            let line = real.loaded.iter().find(|(n, _)| n == name);
            assert!(
                line.is_some_and(|(_, p)| p.is_some() == *found),
                "{}: the real loader's trace does not show {name} {}: {real:?}",
                l.name,
                if *found { "found" } else { "not found" }
            );
        }
        let inputs = StartEnv {
            ld_library_path: l.llp.map(String::from),
            cwd: l.cwd.to_string(),
            gpu: l.caps.is_some(),
            capabilities: l.caps.map(String::from),
            driver_version: Some(DRIVER.into()),
            machine: Some(62),
        };
        let model = trace_rootfs(&r, &inputs, l.root).expect("the model reads the layout");
        let same = match (&model.fatal, &real.fatal) {
            (Some(m), Some(f)) => same_fatal(m, f),
            (None, None) => model.loaded == real.loaded,
            _ => false,
        };
        if !same {
            failures.push(format!(
                "{}:\n  real:  {real:?}\n  model: {model:?}",
                l.name
            ));
        }
        match through_binary(&lab, &r, l, &real) {
            Ok(Binary::Same { dlopen_only }) => {
                judged_by_binary += 1;
                dlopen_warnings += usize::from(dlopen_only);
            }
            Ok(Binary::NotRun) => {}
            Err(f) => failures.push(f),
        }
    }
    println!(
        "{judged_by_binary} layouts judged the same by `gpu-guard scan --rootfs --libraries` ({dlopen_warnings} with only dlopen misses, exit 0 under enforce)"
    );
    if judged_by_binary < 7 || dlopen_warnings == 0 {
        failures.push("too few layouts were judged through the binary".into());
    }
    println!("{} layouts compared against the real loader", all.len());
    let _ = std::fs::remove_dir_all(&lab.work);
    assert!(
        failures.is_empty(),
        "{} of {} layouts differ:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}
