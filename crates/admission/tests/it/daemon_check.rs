//! `check --image docker-daemon:NAME` against a stand-in docker API socket
//! that streams a `docker save` tar (legacy layout: layers first,
//! manifest.json last, chunked, as dockerd answers `GET /images/{name}/get`):
//! the same decision as `check --image` of that tar as a file, and errors as
//! one line. A real dockerd is exercised by integration/test-image-docker.sh.

use crate::registry_support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

static NET: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::hook_bin::bin);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tar_layer(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut t = tar::Builder::new(Vec::new());
    for (p, b) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(b.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        t.append_data(&mut h, p, *b).unwrap();
    }
    t.into_inner().unwrap()
}

/// A legacy `docker save` tar of one image.
fn docker_save(env: &[String]) -> Vec<u8> {
    let lib = std::fs::read(repo_root().join("tests/data/fatbin/multi-arch.so")).unwrap();
    let l1 = tar_layer(&[("usr/local/cuda-12.4/lib64/libcublas.so.12.4.5", &lib)]);
    let l2 = tar_layer(&[("etc/hello", b"hi")]);
    let ids: Vec<String> = [&l1, &l2]
        .iter()
        .map(|l| registry_support::sha256(l))
        .collect();
    let cfg = serde_json::to_vec(&serde_json::json!({"architecture": "amd64", "os": "linux",
        "config": {"Env": env}, "rootfs": {"type": "layers", "diff_ids": ids}}))
    .unwrap();
    let chex = registry_support::sha256(&cfg)[7..].to_string();
    let mut out = tar::Builder::new(Vec::new());
    let mut add = |p: &str, b: &[u8]| {
        let mut h = tar::Header::new_ustar();
        h.set_size(b.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        out.append_data(&mut h, p, b).unwrap();
    };
    let d1 = "a".repeat(64);
    let d2 = "b".repeat(64);
    add(&format!("{d1}/VERSION"), b"1.0");
    add(&format!("{d1}/layer.tar"), &l1);
    add(&format!("{d2}/VERSION"), b"1.0");
    add(&format!("{d2}/layer.tar"), &l2);
    add(&format!("{chex}.json"), &cfg);
    let m = serde_json::json!([{"Config": format!("{chex}.json"), "RepoTags": ["cuda-app:1"], "Layers": [format!("{d1}/layer.tar"), format!("{d2}/layer.tar")]}]);
    add("manifest.json", &serde_json::to_vec(&m).unwrap());
    out.into_inner().unwrap()
}

/// Serves `body` for `GET /images/cuda-app:1/get`, 404 for other names.
fn fake_docker(sock: &Path, body: Vec<u8>) -> Arc<AtomicUsize> {
    let l = UnixListener::bind(sock).unwrap();
    let n = Arc::new(AtomicUsize::new(0));
    let count = n.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
            }
            if !line.starts_with("GET /images/cuda-app:1/get ") {
                let msg = br#"{"message":"reference does not exist"}"#;
                let _ = write!(s, "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", msg.len());
                let _ = s.write_all(msg);
                continue;
            }
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\nTransfer-Encoding: chunked\r\n\r\n");
            for c in body.chunks(70_000) {
                if write!(s, "{:x}\r\n", c.len())
                    .and_then(|_| s.write_all(c))
                    .and_then(|_| s.write_all(b"\r\n"))
                    .is_err()
                {
                    break;
                }
            }
            let _ = s.write_all(b"0\r\n\r\n");
        }
    });
    n
}

#[test]
fn same_decision_as_the_saved_tar() {
    let dir = crate::support::TempDir::new("daemon");
    let env: Vec<String> = std::fs::read_to_string(
        repo_root().join("tests/data/images/cuda-12.4.1-base-ubuntu2204.env"),
    )
    .unwrap()
    .lines()
    .filter(|l| l.contains('='))
    .map(str::to_string)
    .collect();
    let saved = docker_save(&env);
    let file = dir.join("saved.tar");
    std::fs::write(&file, &saved).unwrap();
    let sock = dir.join("docker.sock");
    let conns = fake_docker(&sock, saved);
    let cfg = repo_root().join("config/config.toml");
    let host = repo_root().join("tests/data/hosts/h100x8.json");
    let nodes = repo_root().join("tests/data/nodes/fleet.json");
    let run = |image: &str, extra: &[&str]| {
        Command::new(*NET)
            .arg("--config")
            .arg(&cfg)
            .args(["check", "--image", image, "--json"])
            .args(extra)
            .env("DOCKER_HOST", format!("unix://{}", sock.display()))
            .output()
            .unwrap()
    };
    for extra in [
        vec!["--host", host.to_str().unwrap()],
        vec!["--nodes", nodes.to_str().unwrap()],
    ] {
        let a = run(file.to_str().unwrap(), &extra);
        let b = run("docker-daemon:cuda-app:1", &extra);
        assert!(
            a.status.code().is_some_and(|c| c < 2),
            "{}",
            String::from_utf8_lossy(&a.stderr)
        );
        assert_eq!(
            b.status.code(),
            a.status.code(),
            "{}",
            String::from_utf8_lossy(&b.stderr)
        );
        let mut va: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
        let mut vb: serde_json::Value = serde_json::from_slice(&b.stdout).unwrap();
        if extra[0] == "--nodes" {
            // The library was found and read from the stream.
            assert_eq!(
                vb["image"]["libraries"],
                serde_json::json!(["usr/local/cuda-12.4/lib64/libcublas.so.12.4.5"]),
                "{vb}"
            );
            assert_eq!(vb["image"]["format"], "docker-daemon");
            assert_eq!(vb["image"]["path"], "docker-daemon:cuda-app:1");
        }
        for v in [&mut va, &mut vb] {
            if let Some(m) = v.as_object_mut() {
                m.remove("image");
            }
        }
        assert_eq!(va, vb);
    }
    // Two exports per read: the listing, then the layers in order.
    assert_eq!(conns.load(Ordering::SeqCst), 4);
    let o = run("docker-daemon:nope:1", &["--host", host.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("reference does not exist")
            && err.contains("docker.sock")
            && err.trim().lines().count() == 1,
        "{err}"
    );
    let o = Command::new(*NET)
        .arg("--config")
        .arg(&cfg)
        .args([
            "check",
            "--image",
            "docker-daemon:x",
            "--host",
            host.to_str().unwrap(),
        ])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot connect"));
}
