//! containerd's configuration as containerd merges it (imports, globs,
//! load order; 1.x whole-section replacement, 2.x deep merge), golden
//! tested, and checked against the real `containerd config dump` where
//! containerd is installed (Debian 12: 1.6). Then the install flows the
//! merge decides: NVIDIA's drop-in (the GPU Operator, `nvidia-ctk runtime
//! configure --drop-in-config`) present, absent, and rewritten after
//! install, with the drift `install --check` and `gpu-guard host` report.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::install_support::*;
use gpu_guard::install::containerd::merge::{self, ConfigFs, MergeError, Rules};

/// A host's files in memory.
struct MemFs(BTreeMap<PathBuf, String>);

impl ConfigFs for MemFs {
    fn read(&self, path: &Path) -> Result<Option<String>, MergeError> {
        Ok(self.0.get(path).cloned())
    }
    fn list(&self, dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = self
            .0
            .keys()
            .filter_map(|p| {
                let rel = p.strip_prefix(dir).ok()?;
                Some(
                    rel.components()
                        .next()?
                        .as_os_str()
                        .to_string_lossy()
                        .into_owned(),
                )
            })
            .collect();
        names.dedup();
        names
    }
}

const MAIN: &str = "/etc/containerd/config.toml";

const NVIDIA_DROP_IN: &str = r#"version = 2

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "nvidia"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          privileged_without_host_devices = false
          runtime_engine = ""
          runtime_root = ""
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
            SystemdCgroup = true
"#;

const MAIN_WITH_IMPORTS: &str = r#"version = 2
imports = ["/etc/containerd/conf.d/*.toml"]
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"#;

/// The merge cases: name, files (host path, text).
fn cases() -> Vec<(&'static str, Vec<(&'static str, String)>)> {
    let rt = |name: &str, bin: &str| {
        format!(
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"{name}\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.{name}]\nruntime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.{name}.options]\nBinaryName = \"{bin}\"\n"
        )
    };
    vec![
        ("main-only", vec![(MAIN, MAIN_WITH_IMPORTS.replace("imports = [\"/etc/containerd/conf.d/*.toml\"]\n", ""))]),
        (
            "nvidia-drop-in",
            vec![
                (MAIN, MAIN_WITH_IMPORTS.to_string()),
                ("/etc/containerd/conf.d/99-nvidia.toml", NVIDIA_DROP_IN.to_string()),
            ],
        ),
        (
            "later-file-without-runtimes",
            vec![
                (MAIN, MAIN_WITH_IMPORTS.to_string()),
                ("/etc/containerd/conf.d/10-a.toml", rt("a", "/opt/a")),
                (
                    "/etc/containerd/conf.d/20-cni.toml",
                    "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".cni]\nbin_dir = \"/opt/cni/bin2\"\n".into(),
                ),
            ],
        ),
        (
            "nested-imports-load-breadth-first",
            vec![
                (
                    MAIN,
                    "version = 2\nimports = [\"a.toml\", \"conf.d/*.toml\"]\n".into(),
                ),
                (
                    "/etc/containerd/a.toml",
                    format!("imports = [\"late.toml\"]\n{}", rt("a", "/opt/a")),
                ),
                ("/etc/containerd/late.toml", rt("late", "/opt/late")),
                ("/etc/containerd/conf.d/x.toml", rt("x", "/opt/x")),
            ],
        ),
        (
            "relative-and-circular",
            vec![
                (MAIN, format!("imports = [\"sub/b.toml\"]\n{}", rt("main", "/opt/main"))),
                (
                    "/etc/containerd/sub/b.toml",
                    format!("imports = [\"../config.toml\", \"c.toml\"]\n{}", rt("b", "/opt/b")),
                ),
                ("/etc/containerd/sub/c.toml", rt("c", "/opt/c")),
            ],
        ),
        (
            "glob-matches-hidden-not-other-suffixes",
            vec![
                (MAIN, MAIN_WITH_IMPORTS.to_string()),
                ("/etc/containerd/conf.d/.hidden.toml", rt("hidden", "/opt/h")),
                ("/etc/containerd/conf.d/z.toml.bak", rt("bak", "/opt/bak")),
            ],
        ),
        (
            "version-3-merges",
            vec![
                (
                    MAIN,
                    "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc.options]\nSystemdCgroup = true\n".into(),
                ),
                (
                    "/etc/containerd/conf.d/99-nvidia.toml",
                    "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd]\ndefault_runtime_name = \"nvidia\"\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\n".into(),
                ),
            ],
        ),
    ]
}

fn mem(files: &[(&str, String)]) -> MemFs {
    MemFs(
        files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.clone()))
            .collect(),
    )
}

/// What the effective view says, rendered for a golden file.
fn render(eff: &merge::Effective, order: &[PathBuf]) -> String {
    let mut out = format!(
        "# rules: {}\n# load order: {}\n# version: {}\n# default_runtime_name: {}",
        eff.rules.describe(),
        order
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        eff.version,
        eff.default_runtime()
    );
    if let Some(from) = eff.source_of("containerd.default_runtime_name") {
        out.push_str(&format!(" (from {})", from.display()));
    }
    out.push('\n');
    for n in eff.runtime_names() {
        out.push_str(&format!(
            "# runtime {n}: {}\n",
            eff.option(&n, "BinaryName").unwrap_or_default()
        ));
    }
    out.push_str(&eff.section.to_string());
    out
}

#[test]
fn merge_model_matches_golden_files() {
    for (case, files) in cases() {
        let fs = mem(&files);
        let loaded = merge::load(&fs, Path::new(MAIN), &|_| false).unwrap();
        let order: Vec<PathBuf> = loaded.iter().map(|s| s.path.clone()).collect();
        for rules in [Rules::Replace, Rules::Deep] {
            let eff = merge::effective(&loaded, rules);
            let tag = match rules {
                Rules::Replace => "1.x",
                Rules::Deep => "2.x",
            };
            golden(
                &format!("containerd-merge/{case}.{tag}.txt"),
                &render(&eff, &order),
            );
        }
    }
}

#[test]
fn the_rules_that_decide_the_default_runtime() {
    let eff = |case: &str, rules| {
        let (_, files) = cases().into_iter().find(|(c, _)| *c == case).unwrap();
        let loaded = merge::load(&mem(&files), Path::new(MAIN), &|_| false).unwrap();
        (merge::effective(&loaded, rules), loaded)
    };
    // 1.x: NVIDIA's drop-in replaces the whole CRI section: the main
    // config's runc and sandbox image are gone (containerd#5837).
    let (e, _) = eff("nvidia-drop-in", Rules::Replace);
    assert_eq!(e.default_runtime(), "nvidia");
    assert_eq!(e.runtime_names(), ["nvidia"]);
    assert!(e.section.get("sandbox_image").is_none());
    // 2.x: sections merge.
    let (e, _) = eff("nvidia-drop-in", Rules::Deep);
    assert_eq!(e.default_runtime(), "nvidia");
    assert_eq!(e.runtime_names(), ["runc", "nvidia"]);
    assert_eq!(
        e.section["sandbox_image"].as_str(),
        Some("registry.k8s.io/pause:3.9")
    );
    // A later file with only CNI settings takes the default away in 1.x.
    assert_eq!(
        eff("later-file-without-runtimes", Rules::Replace)
            .0
            .default_runtime(),
        "runc"
    );
    assert_eq!(
        eff("later-file-without-runtimes", Rules::Deep)
            .0
            .default_runtime(),
        "a"
    );
    // Breadth first: main, a.toml, conf.d/x.toml, then a.toml's late.toml.
    let (e, loaded) = eff("nested-imports-load-breadth-first", Rules::Replace);
    let order: Vec<&str> = loaded.iter().map(|s| s.path.to_str().unwrap()).collect();
    assert_eq!(
        order,
        [
            MAIN,
            "/etc/containerd/a.toml",
            "/etc/containerd/conf.d/x.toml",
            "/etc/containerd/late.toml"
        ]
    );
    assert_eq!(e.default_runtime(), "late");
    // Relative to the importing file; a circular import loads once.
    let (e, loaded) = eff("relative-and-circular", Rules::Replace);
    assert_eq!(loaded.len(), 3);
    assert_eq!(e.default_runtime(), "c");
    // Go's `*` matches a leading dot; `*.toml` never matches `.bak`.
    let (e, _) = eff("glob-matches-hidden-not-other-suffixes", Rules::Replace);
    assert_eq!(e.default_runtime(), "hidden");
    // Version 3 is 2.x's: merged, NVIDIA's default over the main runc.
    let (e, _) = eff("version-3-merges", Rules::Deep);
    assert_eq!(e.version, 3);
    assert_eq!(e.default_runtime(), "nvidia");
    assert_eq!(e.runtime_names(), ["runc", "nvidia"]);
}

#[test]
fn a_missing_literal_import_is_an_error_a_missing_glob_is_not() {
    let files = [
        (MAIN, "version = 2\nimports = [\"/etc/containerd/none/*.toml\", \"/etc/containerd/extra.toml\"]\n".to_string()),
    ];
    let err = merge::load(&mem(&files), Path::new(MAIN), &|_| false).unwrap_err();
    assert!(err.to_string().contains("extra.toml"), "{err}");
    let files = [(
        MAIN,
        "version = 2\nimports = [\"/etc/containerd/none/*.toml\"]\n".to_string(),
    )];
    assert_eq!(
        merge::load(&mem(&files), Path::new(MAIN), &|_| false)
            .unwrap()
            .len(),
        1
    );
}

/// Writes a case's files under `root`, with every absolute path in them
/// moved under it, and returns the main config's path.
fn write_tree(root: &Path, files: &[(&str, String)]) -> PathBuf {
    for (p, t) in files {
        let dest = root.join(p.trim_start_matches('/'));
        fs::create_dir_all(dest.parent().unwrap()).unwrap();
        let text = t.replace(
            "\"/etc/containerd/",
            &format!("\"{}/etc/containerd/", root.display()),
        );
        fs::write(dest, text).unwrap();
    }
    root.join(MAIN.trim_start_matches('/'))
}

fn dump(config: &Path) -> toml::Table {
    let out = Command::new("containerd")
        .arg("--config")
        .arg(config)
        .args(["config", "dump"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "containerd config dump {}: {}",
        config.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut doc: toml::Table = String::from_utf8_lossy(&out.stdout).parse().unwrap();
    // The files loaded, in Go's map order: not part of the configuration.
    doc.remove("imports");
    doc
}

fn cri(doc: &toml::Table) -> &toml::Table {
    doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
        .as_table()
        .unwrap()
}

/// The 1.x model against containerd 1.6 itself: the default runtime and
/// every runtime's binary, for every version 2 case.
#[test]
fn the_1x_model_agrees_with_containerd_config_dump() {
    if !have_tool("containerd") {
        return;
    }
    for (case, files) in cases() {
        if case == "version-3-merges" {
            continue; // containerd 1.x refuses version 3
        }
        let root = tempdir(&format!("merge-real-{case}"));
        let main = write_tree(&root, &files);
        let real = dump(&main);
        let loaded = merge::load(&mem(&files), Path::new(MAIN), &|_| false).unwrap();
        let model = merge::effective(&loaded, Rules::Replace);
        let c = cri(&real);
        assert_eq!(
            c["default_runtime_name"].as_str(),
            Some(model.default_runtime().as_str()),
            "{case}"
        );
        let real_runtimes: Vec<&String> = c["runtimes"].as_table().unwrap().keys().collect();
        let mut want = model.runtime_names();
        if want.is_empty() {
            want.push("runc".into()); // containerd's built-in runtime
        }
        want.sort();
        assert_eq!(real_runtimes, want.iter().collect::<Vec<_>>(), "{case}");
        for n in model.runtime_names() {
            assert_eq!(
                c["runtimes"][&n]
                    .get("options")
                    .and_then(|o| o.get("BinaryName"))
                    .and_then(|v| v.as_str()),
                model.option(&n, "BinaryName").as_deref(),
                "{case}: {n}"
            );
        }
        let sandbox = real["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"].as_str();
        let model_sandbox = model.section.get("sandbox_image").and_then(|v| v.as_str());
        assert_eq!(
            sandbox,
            Some(model_sandbox.unwrap_or("registry.k8s.io/pause:3.6")),
            "{case}"
        );
        fs::remove_dir_all(root).unwrap();
    }
}

/// A private host tree for the real-containerd flows: the engine config
/// and conf.d, gpu-guard's own config, state and binaries, all under it.
struct Tree {
    root: PathBuf,
    main: PathBuf,
}

impl Tree {
    fn new(tag: &str, nvidia: bool) -> Tree {
        let root = host_root(tag);
        let main_text = MAIN_WITH_IMPORTS.to_string();
        let mut files = vec![(MAIN, main_text)];
        if nvidia {
            files.push((
                "/etc/containerd/conf.d/99-nvidia.toml",
                NVIDIA_DROP_IN.to_string(),
            ));
        }
        let main = write_tree(&root, &files);
        fs::create_dir_all(root.join("etc/containerd/conf.d")).unwrap();
        fs::create_dir_all(root.join("etc/gpu-guard")).unwrap();
        fs::write(root.join("etc/gpu-guard/config.toml"), "").unwrap();
        Tree { root, main }
    }

    fn conf_d(&self, name: &str) -> PathBuf {
        self.root.join("etc/containerd/conf.d").join(name)
    }

    /// `gpu-guard [--config ours] ARGS containerd` on this tree (no host
    /// root: the paths in the files are this machine's).
    fn gg(&self, verb: &str, extra: &[&str]) -> std::process::Output {
        let mut cmd = bin();
        cmd.arg("--config")
            .arg(self.root.join("etc/gpu-guard/config.toml"))
            .args([verb, "containerd", "--config-path"])
            .arg(&self.main)
            .arg("--state-dir")
            .arg(self.root.join("var/lib/gpu-guard"));
        if verb == "install" {
            cmd.arg("--bin-dir").arg(self.root.join("usr/bin"));
        }
        cmd.args(extra).output().unwrap()
    }

    fn wrapper(&self) -> String {
        self.root
            .join("usr/bin/gpu-guard-runtime")
            .to_string_lossy()
            .into_owned()
    }

    /// containerd's merged view, asserted to run gpu-guard as default.
    fn assert_runs_gpu_guard(&self) -> toml::Table {
        let d = dump(&self.main);
        let c = cri(&d);
        assert_eq!(
            c["default_runtime_name"].as_str(),
            Some("gpu-guard"),
            "{d:#?}"
        );
        let ours = &c["runtimes"]["gpu-guard"];
        assert_eq!(
            ours["options"]["BinaryName"].as_str(),
            Some(self.wrapper().as_str())
        );
        assert_eq!(
            ours["options"]["Root"].as_str(),
            Some("/run/gpu-guard/containerd")
        );
        d
    }

    fn chain(&self) -> Option<String> {
        fs::read_to_string(
            self.root
                .join("etc/gpu-guard/config.d/50-chain-containerd.toml"),
        )
        .ok()
    }
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn with_nvidias_drop_in_install_makes_gpu_guard_the_merged_default() {
    if !have_tool("containerd") {
        return;
    }
    let t = Tree::new("merge-nvidia", true);
    let before = dump(&t.main);
    assert_eq!(
        cri(&before)["default_runtime_name"].as_str(),
        Some("nvidia")
    );
    ok(&t.gg("install", &["--set-default"]));
    // Ours loads after NVIDIA's (99-gpu-guard.toml would sort before it).
    assert!(t.conf_d("zz-gpu-guard.toml").exists());
    assert!(!t.conf_d("99-gpu-guard.toml").exists());
    let d = t.assert_runs_gpu_guard();
    let c = cri(&d);
    // NVIDIA's runtime is kept, and gpu-guard's copies its settings.
    assert_eq!(
        c["runtimes"]["nvidia"]["options"]["BinaryName"].as_str(),
        Some("/usr/local/nvidia/toolkit/nvidia-container-runtime")
    );
    assert_eq!(
        c["runtimes"]["gpu-guard"]["options"]["SystemdCgroup"].as_bool(),
        Some(true)
    );
    // ... and chained: the wrapper execs NVIDIA's runtime for containerd.
    assert!(t
        .chain()
        .unwrap()
        .contains("[runtime.engines.containerd]\npath = \"/usr/local/nvidia/toolkit/nvidia-container-runtime\""));
    assert!(ok(&t.gg("install", &["--check"])).contains("runs gpu-guard as installed"));
    // Idempotent.
    assert!(ok(&t.gg("install", &["--set-default"])).contains("nothing to change"));
    // Uninstall: containerd back to NVIDIA's configuration.
    ok(&t.gg("uninstall", &[]));
    assert!(!t.conf_d("zz-gpu-guard.toml").exists());
    assert!(t.chain().is_none());
    assert_eq!(dump(&t.main), before);
    fs::remove_dir_all(&t.root).unwrap();
}

#[test]
fn without_nvidias_drop_in_install_is_effective_too() {
    if !have_tool("containerd") {
        return;
    }
    let t = Tree::new("merge-plain", false);
    let before = dump(&t.main);
    assert_eq!(cri(&before)["default_runtime_name"].as_str(), Some("runc"));
    ok(&t.gg("install", &["--set-default"]));
    assert!(t.conf_d("99-gpu-guard.toml").exists());
    let d = t.assert_runs_gpu_guard();
    // The main config's own CRI settings still apply (copied: 1.x).
    assert_eq!(
        d["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"].as_str(),
        Some("registry.k8s.io/pause:3.9")
    );
    assert!(t.chain().is_none(), "runc is not chained explicitly");
    ok(&t.gg("uninstall", &[]));
    assert_eq!(dump(&t.main), before);
    fs::remove_dir_all(&t.root).unwrap();
}

#[test]
fn nvidias_drop_in_written_after_install_is_drift_and_reinstall_repairs_it() {
    if !have_tool("containerd") {
        return;
    }
    let t = Tree::new("merge-drift", false);
    ok(&t.gg("install", &["--set-default"]));
    t.assert_runs_gpu_guard();
    // The GPU Operator writes its drop-in after gpu-guard's install.
    let nvidia = t.conf_d("99-nvidia.toml");
    fs::write(&nvidia, NVIDIA_DROP_IN).unwrap();
    let d = dump(&t.main);
    assert_eq!(cri(&d)["default_runtime_name"].as_str(), Some("nvidia"));
    assert!(cri(&d)["runtimes"].get("gpu-guard").is_none());
    let out = t.gg("install", &["--check"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&nvidia.display().to_string()), "{err}");
    assert!(
        err.contains("fix: gpu-guard install containerd --set-default"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // The repair the warning names.
    let out = ok(&t.gg("install", &["--set-default"]));
    assert!(out.contains("zz-gpu-guard.toml"), "{out}");
    assert!(!t.conf_d("99-gpu-guard.toml").exists());
    t.assert_runs_gpu_guard();
    assert!(t
        .chain()
        .unwrap()
        .contains("/usr/local/nvidia/toolkit/nvidia-container-runtime"));
    assert_eq!(t.gg("install", &["--check"]).status.code(), Some(0));
    // NVIDIA's drop-in is rewritten (a toolkit upgrade moves the binary):
    // gpu-guard still runs, but its copy of NVIDIA's settings is stale.
    fs::write(&nvidia, NVIDIA_DROP_IN.replace("/toolkit/", "/toolkit-2/")).unwrap();
    let out = t.gg("install", &["--check"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("zz-gpu-guard.toml") && err.contains("out of date"),
        "{err}"
    );
    ok(&t.gg("install", &["--set-default"]));
    let d = t.assert_runs_gpu_guard();
    assert_eq!(
        cri(&d)["runtimes"]["nvidia"]["options"]["BinaryName"].as_str(),
        Some("/usr/local/nvidia/toolkit-2/nvidia-container-runtime")
    );
    assert!(t.chain().unwrap().contains("/toolkit-2/"));
    // An admin's later file that sets another default: drift, naming it.
    let admin = t.conf_d("zzz-admin.toml");
    fs::write(
        &admin,
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"runc\"\n",
    )
    .unwrap();
    let out = t.gg("install", &["--check"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("zzz-admin.toml"));
    // Install cannot sort after it: it says so, names the file, exits 1.
    let out = t.gg("install", &["--set-default"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("zzz-admin.toml"));
    fs::remove_file(&admin).unwrap();
    ok(&t.gg("uninstall", &[]));
    assert!(!t.conf_d("zz-gpu-guard.toml").exists() && t.chain().is_none());
    fs::remove_dir_all(&t.root).unwrap();
}

/// `gpu-guard host` reads the host's own state directory
/// (/var/lib/gpu-guard); the test gives it one of its own in a private
/// mount namespace, so this machine's /var/lib is never touched.
#[test]
fn host_warns_about_drift_with_the_file_and_the_fix() {
    if !have_tool("containerd") || !have_tool("unshare") {
        return;
    }
    let t = Tree::new("merge-host", false);
    let lib = t.root.join("var/lib");
    let state = lib.join("gpu-guard");
    ok(&t.gg("install", &["--set-default"]));
    assert!(state.join("engines/containerd.json").exists());
    let facts = t.root.join("facts.json");
    fs::write(
        &facts,
        r#"{"driver_version":"535.104.05","cuda_driver_version":"12.2","gpus":[]}"#,
    )
    .unwrap();
    let cfg = t.root.join("etc/gpu-guard/config.toml");
    fs::write(
        &cfg,
        format!("[host]\nfacts_file = \"{}\"\n", facts.display()),
    )
    .unwrap();
    let host = |extra: &str| {
        let script = format!(
            "mount --bind {} /var/lib && exec {} --config {} host {extra}",
            lib.display(),
            crate::support::gpu_guard(),
            cfg.display()
        );
        let out = Command::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (o, e) = host("");
    if e.contains("unshare failed") || e.contains("Operation not permitted") {
        crate::support::skip_or_fail(&format!("no private mount namespace here: {e}"));
        return;
    }
    assert!(!o.contains("no longer runs gpu-guard"), "{o}{e}");
    fs::write(t.conf_d("99-nvidia.toml"), NVIDIA_DROP_IN).unwrap();
    let (o, e) = host("");
    let line = o
        .lines()
        .find(|l| l.contains("containerd no longer runs gpu-guard"))
        .unwrap_or_else(|| panic!("{o}{e}"));
    assert!(line.starts_with("warning: "), "{line}");
    assert!(line.contains("99-nvidia.toml"), "{line}");
    assert!(
        line.contains("fix: gpu-guard install containerd --set-default"),
        "{line}"
    );
    let (_, e) = host("--json");
    assert!(e.contains("containerd no longer runs gpu-guard"), "{e}");
    ok(&t.gg("uninstall", &[]));
    fs::remove_dir_all(&t.root).unwrap();
}
