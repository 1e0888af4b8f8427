//! Builds images offline for the tests (after tests/image/image_reader.rs):
//! layer tars with raw header fields (hostile names survive), gzip and
//! zstd layers, OCI layouts and docker-archive tars.
#![allow(dead_code)]

use sha2::{Digest as _, Sha256};
use std::io::Write;
use std::path::PathBuf;

pub fn sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

pub enum E<'a> {
    File(&'a str, &'a [u8]),
    Dir(&'a str),
    Sym(&'a str, &'a str),
    Hard(&'a str, &'a str),
}

pub fn tar_of(entries: &[E]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        let (name, typ, data, link): (&str, tar::EntryType, &[u8], &str) = match e {
            E::File(p, d) => (p, tar::EntryType::Regular, d, ""),
            E::Dir(p) => (p, tar::EntryType::Directory, &[], ""),
            E::Sym(p, t) => (p, tar::EntryType::Symlink, &[], t),
            E::Hard(p, t) => (p, tar::EntryType::Link, &[], t),
        };
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_entry_type(typ);
        h.set_size(data.len() as u64);
        h.set_mode(0o755);
        h.set_cksum();
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap()
}

pub fn gz(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

pub fn zst(b: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(b, ruzstd::encoding::CompressionLevel::Fastest)
}

/// Decompresses what `gz`/`zst` made, for diff_ids.
pub fn plain(b: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    if b.starts_with(&[0x1f, 0x8b]) {
        flate2::read::MultiGzDecoder::new(b)
            .read_to_end(&mut out)
            .unwrap();
    } else if b.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        ruzstd::decoding::StreamingDecoder::new(b)
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
    } else {
        out = b.to_vec();
    }
    out
}

pub fn config_json(env: &[String], diff_ids: &[String]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": { "Env": env, "Labels": { "org.opencontainers.image.title": "gpu-guard test" } },
        "rootfs": { "type": "layers", "diff_ids": diff_ids.iter().map(|d| format!("sha256:{d}")).collect::<Vec<_>>() }
    }))
    .unwrap()
}

/// Temp dirs come from the shared support module.
pub use crate::support::tempdir as tmp;

/// Writes an OCI layout of these (compressed) layers; returns its directory.
pub fn oci_layout(name: &str, env: &[String], layers: &[Vec<u8>]) -> PathBuf {
    let dir = tmp(name);
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let blob = |b: &[u8]| {
        let h = sha(b);
        std::fs::write(dir.join("blobs/sha256").join(&h), b).unwrap();
        serde_json::json!({ "mediaType": "application/octet-stream", "digest": format!("sha256:{h}"), "size": b.len() })
    };
    let diff_ids: Vec<String> = layers.iter().map(|l| sha(&plain(l))).collect();
    let cfg = blob(&config_json(env, &diff_ids));
    let ls: Vec<_> = layers.iter().map(|l| blob(l)).collect();
    let m = serde_json::json!({ "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": cfg, "layers": ls });
    let mut md = blob(&serde_json::to_vec(&m).unwrap());
    md["annotations"] = serde_json::json!({ "org.opencontainers.image.ref.name": "test:1" });
    let i = serde_json::json!({ "schemaVersion": 2, "manifests": [md] });
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&i).unwrap()).unwrap();
    dir
}

/// Writes a docker-archive tar (`docker save` layout) of these layers
/// (compressed or not: docker load takes both); `tweak` edits manifest.json.
pub fn docker_archive(
    name: &str,
    env: &[String],
    layers: &[Vec<u8>],
    tweak: impl Fn(&mut serde_json::Value),
) -> PathBuf {
    let diff_ids: Vec<String> = layers.iter().map(|l| sha(&plain(l))).collect();
    let cfg = config_json(env, &diff_ids);
    let cname = format!("{}.json", sha(&cfg));
    let mut outer = tar::Builder::new(Vec::new());
    let mut names = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let n = format!("l{i}/layer.tar");
        let mut h = tar::Header::new_gnu();
        h.set_size(l.len() as u64);
        outer.append_data(&mut h, &n, &l[..]).unwrap();
        names.push(n);
    }
    let mut m =
        serde_json::json!([{ "Config": cname, "RepoTags": ["gg-imgcheck:test"], "Layers": names }]);
    tweak(&mut m);
    for (n, d) in [
        (cname.as_str(), cfg),
        ("manifest.json", serde_json::to_vec(&m).unwrap()),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(d.len() as u64);
        outer.append_data(&mut h, n, &d[..]).unwrap();
    }
    let p = tmp(name).join("img.tar");
    std::fs::write(&p, outer.into_inner().unwrap()).unwrap();
    p
}

/// The entries of an env file of tests/data/images.
pub fn image_env(name: &str) -> Vec<String> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/images")
        .join(name);
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .filter(|l| l.contains('='))
        .map(str::to_string)
        .collect()
}
