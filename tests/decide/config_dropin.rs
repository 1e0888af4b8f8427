//! `config.d/*.toml` beside the config file: merged in lexical order over
//! it (tables key by key, arrays replaced), errors naming the file and key,
//! and the file `runtime.path` came from.

use std::fs;
use std::path::{Path, PathBuf};

use gpu_guard::config;
use gpu_guard::core::policy::Mode;

fn tmp(name: &str) -> PathBuf {
    let p = crate::support::tempdir(&format!("dropin-{name}"));
    fs::create_dir_all(p.join("config.d")).unwrap();
    p
}

fn write(p: &Path, text: &str) {
    fs::write(p, text).unwrap();
}

#[test]
fn drop_ins_merge_in_lexical_order() {
    let d = tmp("order");
    let main = d.join("config.toml");
    write(
        &main,
        "mode = \"warn\"\n[host]\nprobe_timeout_ms = 100\ncache_ttl_s = 7\n[detect]\ncdi_kinds = [\"a.com/gpu\", \"b.com/gpu\"]\n",
    );
    write(
        &d.join("config.d/50-b.toml"),
        "[host]\nprobe_timeout_ms = 300\n[runtime]\npath = \"/usr/bin/b\"\n",
    );
    write(
        &d.join("config.d/10-a.toml"),
        "[host]\nprobe_timeout_ms = 200\n[detect]\ncdi_kinds = [\"c.com/gpu\"]\n[runtime]\npath = \"/usr/bin/a\"\n",
    );
    // Not drop-ins: other suffixes, hidden files, directories.
    write(&d.join("config.d/90-z.toml.dpkg-old"), "mode = \"off\"\n");
    write(&d.join("config.d/.99-hidden.toml"), "mode = \"off\"\n");
    fs::create_dir_all(d.join("config.d/dir.toml")).unwrap();

    let l = config::load_detailed(Some(&main)).unwrap();
    assert_eq!(l.config.mode, Mode::Warn);
    assert_eq!(l.config.host.probe_timeout_ms, 300, "later file wins");
    assert_eq!(
        l.config.host.cache_ttl_s, 7,
        "keys not set by drop-ins stay"
    );
    assert_eq!(
        l.config.detect.cdi_kinds,
        vec!["c.com/gpu"],
        "arrays replace"
    );
    assert_eq!(l.config.runtime.path, "/usr/bin/b");
    assert_eq!(l.runtime_path_from, Some(d.join("config.d/50-b.toml")));
    assert_eq!(
        l.drop_ins,
        vec![d.join("config.d/10-a.toml"), d.join("config.d/50-b.toml")]
    );
    assert_eq!(config::load(Some(&main)).unwrap(), l.config);
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn arrays_of_tables_replace_whole() {
    let d = tmp("aot");
    let main = d.join("config.toml");
    write(&main, "");
    write(
        &d.join("config.d/50-x.toml"),
        "[[tuning.env]]\nname = \"ONLY\"\nvalue = \"1\"\n[[security.exceptions]]\nnamespace = \"gpu-operator\"\nallow_privileged = true\n",
    );
    let c = config::load(Some(&main)).unwrap();
    assert_eq!(c.tuning.env.len(), 1);
    assert_eq!(c.tuning.env[0].name, "ONLY");
    assert_eq!(c.security.exceptions.len(), 1);
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn errors_name_the_file_and_key() {
    let d = tmp("errors");
    let main = d.join("config.toml");
    write(&main, "mode = \"enforce\"\n");
    let bad = d.join("config.d/50-chain.toml");
    write(&bad, "[runtime]\npaht = \"/usr/bin/x\"\n");
    let e = config::load(Some(&main)).unwrap_err();
    assert_eq!(e.path, bad);
    let msg = e.to_string();
    assert!(
        msg.contains("50-chain.toml") && msg.contains("paht"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");

    write(&bad, "[runtime\n");
    let msg = config::load(Some(&main)).unwrap_err().to_string();
    assert!(
        msg.contains("50-chain.toml") && msg.contains("line 1"),
        "{msg}"
    );

    // A value only wrong once merged names both places.
    write(
        &bad,
        "[[tuning.env]]\nname = \"X\"\nvalue = \"1\"\nframeworks = [\"nope\"]\n",
    );
    let msg = config::load(Some(&main)).unwrap_err().to_string();
    assert!(
        msg.contains("config.d") && msg.contains("tuning.env[0].frameworks"),
        "{msg}"
    );

    // An error in the main file still names the main file.
    fs::remove_file(&bad).unwrap();
    write(&main, "mod = \"enforce\"\n");
    write(&d.join("config.d/10-ok.toml"), "mode = \"warn\"\n");
    let e = config::load(Some(&main)).unwrap_err();
    assert_eq!(e.path, main);
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn missing_default_file_still_reads_drop_ins_and_no_dir_is_fine() {
    let d = tmp("nodir");
    let main = d.join("config.toml");
    write(&main, "[runtime]\npath = \"/usr/bin/runc\"\n");
    fs::remove_dir_all(d.join("config.d")).unwrap();
    let l = config::load_detailed(Some(&main)).unwrap();
    assert_eq!(l.runtime_path_from, Some(main.clone()));
    assert!(l.drop_ins.is_empty());
    // An explicit missing main file is an error even with drop-ins.
    fs::create_dir_all(d.join("config.d")).unwrap();
    write(&d.join("config.d/50-x.toml"), "mode = \"warn\"\n");
    fs::remove_file(&main).unwrap();
    assert!(config::load(Some(&main)).unwrap_err().unreadable);
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn check_reads_drop_ins_through_the_binary() {
    let d = tmp("bin");
    let main = d.join("config.toml");
    write(&main, "[log]\nsyslog = false\n");
    write(&d.join("config.d/50-x.toml"), "[host]\nfacts_fil = \"\"\n");
    let o = std::process::Command::new(crate::support::gpu_guard())
        .args(["--config", main.to_str().unwrap(), "check", "--env", "A=1"])
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        all.contains("50-x.toml") && all.contains("facts_fil"),
        "{all}"
    );
    let _ = fs::remove_dir_all(&d);
}

fn gg(config: &Path, args: &[&str]) -> (i32, String) {
    let o = std::process::Command::new(crate::support::gpu_guard())
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

fn host_config(d: &Path) -> PathBuf {
    let main = d.join("config.toml");
    let facts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hosts/a100.json");
    write(
        &main,
        &format!(
            "[host]\nfacts_file = \"{}\"\ncache_file = \"\"\n[kernel_image]\nseverity = \"off\"\n[log]\nsyslog = false\n",
            facts.display()
        ),
    );
    main
}

#[test]
fn check_and_host_show_the_chained_runtime() {
    let d = tmp("show");
    let main = host_config(&d);
    let chain = d.join("config.d/50-chain-nvidia-containerd.toml");
    // A runtime that exists (one that does not is a host and config error:
    // tests/test_hooks/wrapper_engines.rs).
    let rt = d.join("nvidia-container-runtime");
    write(&rt, "#!/bin/sh\nexec runc \"$@\"\n");
    fs::set_permissions(&rt, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    write(&chain, &format!("[runtime]\npath = \"{}\"\n", rt.display()));
    let want = format!(
        "chained runtime: {} (from {})",
        rt.display(),
        chain.display()
    );
    let (code, out) = gg(&main, &["host"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&want), "{out}");
    let (code, out) = gg(&main, &["check", "--env", "NVIDIA_VISIBLE_DEVICES=all"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&want), "{out}");
    let (_, out) = gg(
        &main,
        &["check", "--json", "--env", "NVIDIA_VISIBLE_DEVICES=all"],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["check"] == "config"
            && f["severity"] == "info"
            && f["message"] == want.as_str()));
    // Without runtime.path: no line.
    fs::remove_file(&chain).unwrap();
    let (_, out) = gg(&main, &["host"]);
    assert!(!out.contains("chained runtime"), "{out}");
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn runtime_path_naming_gpu_guard_is_an_error_not_a_loop() {
    let d = tmp("loop");
    let main = host_config(&d);
    let me = crate::support::gpu_guard();
    let link = d.join("runc");
    std::os::unix::fs::symlink(me, &link).unwrap();
    for target in [
        me.to_string(),
        link.display().to_string(),
        "/usr/bin/gpu-guard-runtime".to_string(),
    ] {
        write(
            &d.join("config.d/50-chain.toml"),
            &format!("[runtime]\npath = \"{target}\"\n"),
        );
        // The wrapper refuses to exec itself, in one line, at once.
        let (code, out) = gg(&main, &["runtime", "--version"]);
        assert_eq!(code, 127, "{target}: {out}");
        assert!(out.contains("names gpu-guard itself"), "{target}: {out}");
        assert_eq!(out.trim_end().lines().count(), 1, "{out}");
        let (code, out) = gg(&main, &["check", "--env", "NVIDIA_VISIBLE_DEVICES=all"]);
        assert_eq!(code, 1, "{target}: {out}");
        assert!(out.contains("gpu-guard itself"), "{out}");
    }
    // In this test process /proc/self/exe is the test binary: by name only.
    assert!(config::runtime_is_self("/usr/bin/gpu-guard-runtime"));
    assert!(!config::runtime_is_self("/bin/true"));
    assert!(!config::runtime_is_self(""));
    let _ = fs::remove_dir_all(&d);
}
