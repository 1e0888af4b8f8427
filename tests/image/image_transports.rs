//! `check --image` in skopeo's spelling (containers-transports(5)):
//! `oci:DIR[:REF]`, `oci-archive:FILE[:REF]`, `docker-archive:FILE[:REF|:@N]`,
//! besides bare paths; a transport that names the wrong format, an image
//! the archive does not hold, transports gpu-guard does not read, and a
//! file whose name looks like a transport (`./oci:x`).

use crate::compat_support::{config, data, BIN};
use crate::image_support::{config_json, gz, oci_layout, plain, sha, tar_of, E};
use crate::support::TempDir;
use std::path::Path;
use std::process::Command;

/// `cuda>=13.0` is refused on the A100 host (driver 535, CUDA 12.2);
/// `cuda>=11.0` is allowed: which image was read shows in the exit status.
const NEW: &str = "NVIDIA_REQUIRE_CUDA=cuda>=13.0";
const OLD: &str = "NVIDIA_REQUIRE_CUDA=cuda>=11.0";

/// `check --image ARG --host a100.json` run in `cwd`: exit status, stdout, stderr.
fn check(cwd: &Path, arg: &str) -> (i32, String, String) {
    let cfg = config(cwd, "");
    let o = Command::new(*BIN)
        .current_dir(cwd)
        .arg("--config")
        .arg(&cfg)
        .args(["check", "--image", arg, "--host"])
        .arg(data("hosts/a100.json"))
        .env_remove("GPU_GUARD_CONFIG")
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A docker-archive of two images, `old:11` (allowed) then `new:13` (refused).
fn two_image_archive(path: &Path) {
    let layer = tar_of(&[E::File("etc/x", b"x")]);
    let diff = sha(&plain(&layer));
    let mut outer = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        outer.append_data(&mut h, name, data).unwrap();
    };
    add("l0/layer.tar", &layer);
    let mut entries = Vec::new();
    for (tag, env) in [("old:11", OLD), ("new:13", NEW)] {
        let cfg = config_json(&[env.to_string()], std::slice::from_ref(&diff));
        let name = format!("{}.json", sha(&cfg));
        add(&name, &cfg);
        entries.push(
            serde_json::json!({ "Config": name, "RepoTags": [tag], "Layers": ["l0/layer.tar"] }),
        );
    }
    add("manifest.json", &serde_json::to_vec(&entries).unwrap());
    std::fs::write(path, outer.into_inner().unwrap()).unwrap();
}

/// The OCI layout `dir` as a tar (an OCI archive).
fn oci_archive(dir: &Path, out: &Path) {
    let mut b = tar::Builder::new(std::fs::File::create(out).unwrap());
    b.append_dir_all(".", dir).unwrap();
    b.finish().unwrap();
}

#[test]
fn oci_and_oci_archive_transports_read_the_named_image() {
    let t = TempDir::new("transport-oci");
    let layer = gz(&tar_of(&[E::File("etc/x", b"x")]));
    let dir = oci_layout("transport-oci-layout", &[NEW.to_string()], &[layer]);
    let d = dir.display().to_string();
    // The layout's one image is named test:1 (its ref.name annotation).
    for arg in [d.clone(), format!("oci:{d}"), format!("oci:{d}:test:1")] {
        let (code, out, err) = check(t.path(), &arg);
        assert_eq!(code, 1, "{arg}: {out}{err}");
        assert!(out.contains("cuda>=13.0"), "{arg}: {out}");
    }
    let (code, _, err) = check(t.path(), &format!("oci:{d}:nope"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no image named \"nope\""), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    let archive = t.join("img.tar");
    oci_archive(&dir, &archive);
    let a = archive.display().to_string();
    for arg in [
        a.clone(),
        format!("oci-archive:{a}"),
        format!("oci-archive:{a}:test:1"),
    ] {
        let (code, out, err) = check(t.path(), &arg);
        assert_eq!(code, 1, "{arg}: {out}{err}");
    }
    // The transport names a format; another one is an error that says so.
    let (code, _, err) = check(t.path(), &format!("docker-archive:{a}"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is an OCI archive, not a docker-archive"),
        "{err}"
    );
    assert!(err.contains("oci-archive:PATH"), "{err}");
    let (code, _, err) = check(t.path(), &format!("oci-archive:{d}"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("an OCI image layout directory, not an OCI archive"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn docker_archive_transport_picks_by_tag_or_index() {
    let t = TempDir::new("transport-docker");
    let archive = t.join("two.tar");
    two_image_archive(&archive);
    let a = archive.display().to_string();
    // Two images and no name: ambiguous, as before.
    for arg in [a.clone(), format!("docker-archive:{a}")] {
        let (code, _, err) = check(t.path(), &arg);
        assert_eq!(code, 2, "{arg}: {err}");
        assert!(err.contains("holds several images"), "{err}");
    }
    for (sel, want) in [
        ("old:11", 0),
        ("new:13", 1),
        // Docker's normalization: both spellings name the same image.
        ("docker.io/library/old:11", 0),
        ("@0", 0),
        ("@1", 1),
    ] {
        let arg = format!("docker-archive:{a}:{sel}");
        let (code, out, err) = check(t.path(), &arg);
        assert_eq!(code, want, "{arg}: {out}{err}");
    }
    let (code, _, err) = check(t.path(), &format!("docker-archive:{a}:@2"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("holds 2 images; there is no image @2"),
        "{err}"
    );
    let (code, _, err) = check(t.path(), &format!("docker-archive:{a}:old"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no image named \"old\""), "{err}");
    let (code, _, err) = check(t.path(), &format!("docker-archive:{a}:old@sha256:ab"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not by digest"), "{err}");
}

#[test]
fn a_file_named_like_a_transport_and_unread_transports() {
    let t = TempDir::new("transport-names");
    // A docker-archive whose file name begins with a transport's.
    two_image_archive(&t.join("oci:x"));
    std::fs::rename(t.join("oci:x"), t.join("oci:x.tar")).unwrap();
    let (code, out, err) = check(t.path(), "./oci:x.tar");
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("holds several images"),
        "read as the file: {err}"
    );
    // Spelled without `./`, it is the oci transport, as in skopeo: the
    // layout `x.tar`, which does not exist.
    let (code, _, err) = check(t.path(), "oci:x.tar");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("x.tar") && !err.contains("several"), "{err}");
    // A name with a colon that is no transport is a path.
    std::fs::rename(t.join("oci:x.tar"), t.join("build:7.tar")).unwrap();
    let (code, _, err) = check(t.path(), "build:7.tar");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("holds several images"), "{err}");
    for (arg, want) in [
        (
            "dir:/tmp/img",
            "the dir: transport is not read by gpu-guard",
        ),
        (
            "containers-storage:busybox",
            "containers-storage: transport",
        ),
        ("oci:", "names no file"),
        (
            "docker-archive:a.tar:",
            "the reference after the path is empty",
        ),
    ] {
        let (code, _, err) = check(t.path(), arg);
        assert_eq!(code, 2, "{arg}: {err}");
        assert!(err.contains(want), "{arg}: {err}");
        assert!(err.starts_with("gpu-guard: error: --image: "), "{err}");
    }
}

/// A bare `--image` that names no file: one line, exit 2, that names the
/// forms `--image` takes and, for a value that reads as a docker
/// reference, the `docker://` and `docker-daemon:` spellings of it; an
/// existing file of that name is still read as the file.
#[test]
fn a_registry_name_without_its_transport_says_how_to_spell_it() {
    let t = TempDir::new("noref");
    let dir = t.path();
    let forms = [
        "oci:DIR[:REF]",
        "docker-archive:FILE",
        "docker://HOST[:PORT]/REPO[:TAG|@DIGEST]",
        "docker-daemon:NAME[:TAG]",
    ];
    for r in [
        "nvidia/cuda:12.4.1-base-ubuntu22.04",
        "ubuntu:22.04",
        "nvcr.io/nvidia/pytorch:24.05-py3",
    ] {
        let (code, _, err) = check(dir, r);
        assert_eq!(code, 2, "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(!err.contains("os error"), "{err}");
        for n in [
            format!("--image {r}: no such file or directory"),
            format!("docker://{r}"),
            format!("docker-daemon:{r}"),
        ] {
            assert!(err.contains(&n), "{n:?} not in {err}");
        }
        for f in forms {
            assert!(err.contains(f), "{f:?} not in {err}");
        }
    }
    // A path is not offered as a registry image; a control character is escaped.
    for p in ["./missing.tar", "/nonexistent/layout", "img\u{1b}[2J"] {
        let (code, _, err) = check(dir, p);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("no such file or directory"), "{err}");
        assert!(
            !err.contains("docker://missing") && !err.contains("docker://img"),
            "{err}"
        );
        assert!(!err.contains('\u{1b}'), "{err}");
        assert!(forms.iter().all(|f| err.contains(f)), "{err}");
    }
    // A file of that name exists: it is read as the file.
    let layer = gz(&tar_of(&[E::File("etc/x", b"x")]));
    let layout = oci_layout("noref-layout", &[OLD.to_string()], &[layer]);
    std::fs::rename(&layout, dir.join("ubuntu:22.04")).unwrap();
    let (code, out, err) = check(dir, "ubuntu:22.04");
    assert_eq!(code, 0, "{out}{err}");
}
