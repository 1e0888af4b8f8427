//! The image reader (src/image) on images built here, offline: OCI layouts,
//! docker-archive and OCI archive tars, gzip/zstd/plain layers, whiteouts,
//! a multi-platform index, and every hostile case with its exact error.

use gpu_guard::image::{Image, ImageError, ImageInfo, Limits, Options, Platform};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// A tar entry, written with raw header fields so hostile names survive
/// (the tar crate's Builder refuses `..`).
enum E<'a> {
    File(&'a str, &'a [u8]),
    Dir(&'a str),
    Sym(&'a str, &'a str),
    Hard(&'a str, &'a str),
    /// A header of the given type and size, data of that many bytes.
    Raw(u8, &'a str, usize),
}

fn tar_of(entries: &[E]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        let (name, typ, data, link): (&str, tar::EntryType, Vec<u8>, &str) = match e {
            E::File(p, d) => (p, tar::EntryType::Regular, d.to_vec(), ""),
            E::Dir(p) => (p, tar::EntryType::Directory, vec![], ""),
            E::Sym(p, t) => (p, tar::EntryType::Symlink, vec![], t),
            E::Hard(p, t) => (p, tar::EntryType::Link, vec![], t),
            E::Raw(t, p, n) => (p, tar::EntryType::new(*t), vec![b'a'; *n], ""),
        };
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_entry_type(typ);
        h.set_size(data.len() as u64);
        h.set_mode(0o755);
        h.set_cksum();
        b.append(&h, &data[..]).unwrap();
    }
    b.into_inner().unwrap()
}

fn gz(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn zst(b: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(b, ruzstd::encoding::CompressionLevel::Fastest)
}

fn config_json(arch: &str, env: &[&str], diff_ids: &[String]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "architecture": arch, "os": "linux",
        "config": { "Env": env, "Labels": { "com.nvidia.cudnn.version": "9.1" } },
        "rootfs": { "type": "layers", "diff_ids": diff_ids.iter().map(|d| format!("sha256:{d}")).collect::<Vec<_>>() }
    }))
    .unwrap()
}

use crate::support::tempdir as tmp;

/// An OCI layout being written.
struct Oci {
    dir: PathBuf,
}

impl Oci {
    fn new(name: &str) -> Oci {
        let dir = tmp(name);
        std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
        std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        Oci { dir }
    }
    fn blob(&self, b: &[u8]) -> serde_json::Value {
        let h = sha(b);
        std::fs::write(self.dir.join("blobs/sha256").join(&h), b).unwrap();
        serde_json::json!({ "mediaType": "application/octet-stream", "digest": format!("sha256:{h}"), "size": b.len() })
    }
    fn path(&self, d: &serde_json::Value) -> PathBuf {
        self.dir
            .join("blobs/sha256")
            .join(&d["digest"].as_str().unwrap()[7..])
    }
    /// Writes config + manifest for these (already compressed) layers.
    fn manifest(&self, arch: &str, env: &[&str], layers: &[Vec<u8>]) -> serde_json::Value {
        let cfg = self.blob(&config_json(arch, env, &[]));
        let ls: Vec<_> = layers.iter().map(|l| self.blob(l)).collect();
        let m = serde_json::json!({ "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": cfg, "layers": ls });
        self.blob(&serde_json::to_vec(&m).unwrap())
    }
    fn index(&self, manifests: Vec<serde_json::Value>) {
        let i = serde_json::json!({ "schemaVersion": 2, "manifests": manifests });
        std::fs::write(self.dir.join("index.json"), serde_json::to_vec(&i).unwrap()).unwrap();
    }
}

fn layer0() -> Vec<u8> {
    tar_of(&[
        E::Dir("usr/"),
        E::Dir("usr/lib/"),
        E::File("usr/lib/libcuda.so.1", b"old"),
        E::File("usr/lib/libgone.so", b"gone"),
        E::File("opt/d/a", b"a"),
        E::File("opt/d/b", b"b"),
        E::File("usr/local/cuda-12.4/compat/libcuda.so.550.54.15", b"compat"),
        E::Sym("usr/local/cuda", "cuda-12.4"),
        E::File("/etc/abs", b"absolute names are taken from the root"),
    ])
}

fn layer1() -> Vec<u8> {
    tar_of(&[
        E::File("usr/lib/libcuda.so.1", b"new"),
        E::File("usr/lib/.wh.libgone.so", b""),
        E::File("opt/d/.wh..wh..opq", b""),
        E::File("opt/d/c", b"c"),
        E::Hard("usr/lib/libcuda-link.so", "usr/lib/libcuda.so.1"),
        E::Sym("usr/lib/libcuda.so", "libcuda.so.1"),
    ])
}

const FINAL: &[&str] = &[
    "etc/abs",
    "opt/d/c",
    "usr/lib/libcuda-link.so",
    "usr/lib/libcuda.so.1",
    "usr/local/cuda-12.4/compat/libcuda.so.550.54.15",
];

fn oci_two_layers(name: &str) -> Oci {
    let o = Oci::new(name);
    let m = o.manifest(
        "amd64",
        &["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"],
        &[gz(&layer0()), zst(&layer1())],
    );
    o.index(vec![m]);
    o
}

fn libs(p: &str) -> bool {
    p.ends_with(".so") || p.contains(".so.")
}

/// Library path -> (content, aliases).
type Libs = BTreeMap<String, (String, Vec<String>)>;

/// Opens, indexes and reads the libraries; returns what was seen.
fn read_all(path: &Path, opts: &Options) -> Result<(ImageInfo, Vec<String>, Libs), ImageError> {
    let img = Image::open(path, opts)?;
    let tree = img.index()?;
    let files: Vec<String> = tree.files().map(str::to_string).collect();
    let mut seen = BTreeMap::new();
    img.read_files(&tree, &libs, &mut |f, r| {
        let mut s = String::new();
        r.read_to_string(&mut s)?;
        seen.insert(f.path.clone(), (s, f.aliases.clone()));
        Ok(())
    })?;
    Ok((img.info().clone(), files, seen))
}

fn expected_libs() -> Libs {
    BTreeMap::from([
        (
            "usr/lib/libcuda-link.so".to_string(),
            (
                "new".to_string(),
                vec![
                    "usr/lib/libcuda.so".to_string(),
                    "usr/lib/libcuda.so.1".to_string(),
                ],
            ),
        ),
        (
            "usr/local/cuda-12.4/compat/libcuda.so.550.54.15".to_string(),
            ("compat".to_string(), vec![]),
        ),
    ])
}

fn err(path: &Path, opts: &Options) -> String {
    match read_all(path, opts) {
        Ok(_) => panic!("{} was accepted", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn oci_layout_whiteouts_opaque_and_replacement() {
    let o = oci_two_layers("layout");
    let img = Image::open(&o.dir, &Options::default()).unwrap();
    assert_eq!(
        img.env(),
        ["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"]
    );
    assert_eq!(img.labels()["com.nvidia.cudnn.version"], "9.1");
    let tree = img.index().unwrap();
    assert_eq!(
        tree.resolve("usr/local/cuda/compat").unwrap(),
        "usr/local/cuda-12.4/compat"
    );
    assert_eq!(
        tree.resolve("/usr/lib/libcuda.so").unwrap(),
        "usr/lib/libcuda.so.1"
    );
    let (info, files, seen) = read_all(&o.dir, &Options::default()).unwrap();
    assert_eq!(files, FINAL);
    assert_eq!(seen, expected_libs());
    assert_eq!(info.platform, "linux/amd64");
    assert_eq!(info.layers, 2);
    assert!(info.manifest_digest.unwrap().starts_with("sha256:"));
    // Only the layers holding a matched file are read again.
    let stats = img
        .read_files(&tree, &|p| p == "opt/d/c", &mut |_, _| Ok(()))
        .unwrap();
    assert_eq!((stats.files, stats.layers_read), (1, 1));
}

#[test]
fn oci_archive_reads_the_same() {
    let o = oci_two_layers("ociarchive-src");
    let tarfile = tmp("ociarchive").join("img.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&tarfile).unwrap());
    b.append_dir_all(".", &o.dir).unwrap();
    b.finish().unwrap();
    drop(b);
    let (info, files, seen) = read_all(&tarfile, &Options::default()).unwrap();
    assert_eq!(files, FINAL);
    assert_eq!(seen, expected_libs());
    assert_eq!(
        serde_json::to_value(&info).unwrap()["format"],
        "oci-archive"
    );
}

/// `docker save` (legacy layout): plain layer tars, checked against the
/// config's diff_ids; a duplicate layer as a symlink to the first.
fn docker_archive(
    name: &str,
    layers: &[Vec<u8>],
    tweak: impl Fn(&mut serde_json::Value),
) -> PathBuf {
    let diff_ids: Vec<String> = layers.iter().map(|l| sha(l)).collect();
    let cfg = config_json("amd64", &["NVIDIA_VISIBLE_DEVICES=all"], &diff_ids);
    let cname = format!("{}.json", sha(&cfg));
    let mut outer = tar::Builder::new(Vec::new());
    let mut names = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let n = format!("l{i}/layer.tar");
        let mut h = tar::Header::new_gnu();
        if i > 0 && layers[i] == layers[0] {
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            outer.append_link(&mut h, &n, "../l0/layer.tar").unwrap();
        } else {
            h.set_size(l.len() as u64);
            outer.append_data(&mut h, &n, &l[..]).unwrap();
        }
        names.push(n);
    }
    let mut m =
        serde_json::json!([{ "Config": cname, "RepoTags": ["cuda:12.4"], "Layers": names }]);
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

#[test]
fn docker_archive_reads_the_same() {
    let p = docker_archive("docker", &[layer0(), layer1()], |_| {});
    let (info, files, seen) = read_all(&p, &Options::default()).unwrap();
    assert_eq!(files, FINAL);
    assert_eq!(seen, expected_libs());
    assert_eq!(info.reference.as_deref(), Some("cuda:12.4"));
    assert!(info.manifest_digest.is_none());
    // A repeated layer stored as a symlink to the first one.
    let p = docker_archive("docker-dup", &[layer0(), layer1(), layer0()], |_| {});
    let (_, files, _) = read_all(&p, &Options::default()).unwrap();
    assert!(
        files.contains(&"usr/lib/libgone.so".to_string()),
        "{files:?}"
    );
}

#[test]
fn multi_platform_index() {
    let o = Oci::new("multi");
    let layer = gz(&tar_of(&[E::File("x", b"x")]));
    let mut amd = o.manifest("amd64", &["ARCH=amd64"], std::slice::from_ref(&layer));
    amd["platform"] = serde_json::json!({ "os": "linux", "architecture": "amd64" });
    let mut arm = o.manifest("arm64", &["ARCH=arm64"], &[layer]);
    arm["platform"] =
        serde_json::json!({ "os": "linux", "architecture": "arm64", "variant": "v8" });
    o.index(vec![arm, amd]);
    let env = |p: &str| {
        let opts = Options {
            platform: Platform::parse(p).unwrap(),
            ..Options::default()
        };
        Image::open(&o.dir, &opts)
            .map(|i| i.env())
            .map_err(|e| e.to_string())
    };
    assert_eq!(env("linux/amd64").unwrap(), ["ARCH=amd64"]);
    assert_eq!(env("linux/arm64").unwrap(), ["ARCH=arm64"]);
    assert_eq!(env("linux/arm64/v8").unwrap(), ["ARCH=arm64"]);
    assert_eq!(
        env("linux/s390x").unwrap_err(),
        "no image for platform linux/s390x (the index has: linux/arm64/v8, linux/amd64)"
    );
    assert_eq!(
        Image::open(&o.dir, &Options::default()).unwrap().env(),
        ["ARCH=amd64"]
    );
    // A single-platform image is refused for another platform too.
    let single = oci_two_layers("single");
    let opts = Options {
        platform: Platform::parse("linux/arm64").unwrap(),
        ..Options::default()
    };
    assert_eq!(
        Image::open(&single.dir, &opts).err().unwrap().to_string(),
        "no image for platform linux/arm64 (the index has: linux/amd64)"
    );
    assert_eq!(
        Platform::parse("linux").unwrap_err().to_string(),
        "invalid platform \"linux\" (expected os/arch[/variant])"
    );
}

fn oci_one_layer(name: &str, layer: Vec<u8>) -> (Oci, serde_json::Value) {
    let o = Oci::new(name);
    let l = o.blob(&layer);
    let m = o.manifest("amd64", &[], &[layer]);
    o.index(vec![m]);
    (o, l)
}

#[test]
fn hostile_tar_paths() {
    let (o, l) = oci_one_layer("traversal", gz(&tar_of(&[E::File("../../etc/evil", b"x")])));
    let h = &l["digest"].as_str().unwrap()[7..];
    assert_eq!(
        err(&o.dir, &Options::default()),
        format!("layer 0 (blobs/sha256/{h}): entry \"../../etc/evil\" escapes the image root")
    );
    let (o, l) = oci_one_layer("hardlink-out", tar_of(&[E::Hard("x", "../../etc/shadow")]));
    let h = &l["digest"].as_str().unwrap()[7..];
    assert_eq!(
        err(&o.dir, &Options::default()),
        format!("layer 0 (blobs/sha256/{h}): entry \"../../etc/shadow\" escapes the image root")
    );
}

#[test]
fn hostile_symlinked_blob_and_index() {
    let (o, l) = oci_one_layer("symblob", gz(&tar_of(&[E::File("x", b"x")])));
    let blob = o.path(&l);
    std::fs::remove_file(&blob).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &blob).unwrap();
    let h = &l["digest"].as_str().unwrap()[7..];
    assert_eq!(
        err(&o.dir, &Options::default()),
        format!("blobs/sha256/{h} is not a regular file (symlinks and special files are refused)")
    );
    let o = oci_two_layers("symindex");
    let real = o.dir.join("index.json.real");
    std::fs::rename(o.dir.join("index.json"), &real).unwrap();
    std::os::unix::fs::symlink(&real, o.dir.join("index.json")).unwrap();
    assert_eq!(
        err(&o.dir, &Options::default()),
        "index.json is not a regular file (symlinks and special files are refused)"
    );
}

#[test]
fn hostile_budgets() {
    // 64 MiB of zeros gzip to about 64 KiB.
    let bomb = gz(&tar_of(&[E::File("zeros", &vec![0u8; 64 << 20])]));
    assert!(bomb.len() < 1 << 20);
    let (o, _) = oci_one_layer("bomb", bomb);
    let limits = |f: &dyn Fn(&mut Limits)| {
        let mut l = Limits::default();
        f(&mut l);
        Options {
            limits: l,
            ..Options::default()
        }
    };
    assert_eq!(
        err(&o.dir, &limits(&|l| l.max_uncompressed_bytes = 1 << 20)),
        "the uncompressed-bytes budget (1048576 bytes) ran out"
    );
    assert_eq!(
        err(&o.dir, &limits(&|l| l.max_time = Duration::ZERO)),
        "the time budget (0 s) ran out"
    );
    let (o, _) = oci_one_layer(
        "entries",
        tar_of(&[E::File("a", b""), E::File("b", b""), E::File("c", b"")]),
    );
    assert_eq!(
        err(&o.dir, &limits(&|l| l.max_entries = 2)),
        "the entry budget (2 entries) ran out"
    );
    // A GNU long name the tar crate would read whole into memory.
    let (o, l) = oci_one_layer(
        "longname",
        gz(&tar_of(&[
            E::Raw(b'L', "././@LongLink", 2 << 20),
            E::File("x", b""),
        ])),
    );
    let h = &l["digest"].as_str().unwrap()[7..];
    assert_eq!(
        err(&o.dir, &Options::default()),
        format!("layer 0 (blobs/sha256/{h}): tar extension header of 2097152 bytes is over the 1048576-byte limit")
    );
}

#[test]
fn hostile_digests_and_paths_outside() {
    let o = Oci::new("outside");
    o.index(vec![serde_json::json!({ "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:../../etc/passwd", "size": 10 })]);
    assert_eq!(
        err(&o.dir, &Options::default()),
        "index.json manifest has an invalid digest \"sha256:../../etc/passwd\""
    );
    let p = docker_archive("docker-outside", &[layer0()], |m| {
        m[0]["Config"] = "../../etc/passwd".into()
    });
    assert_eq!(
        err(&p, &Options::default()),
        "manifest.json config path \"../../etc/passwd\" points outside the image"
    );

    // Config, manifest and layer blobs rewritten under their old names.
    let o = oci_two_layers("badconfig");
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(o.dir.join("index.json")).unwrap()).unwrap();
    let mpath = o.path(&m["manifests"][0]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
    let cpath = o.path(&manifest["config"]);
    let mut cfg = std::fs::read(&cpath).unwrap();
    let want = sha(&cfg);
    cfg[5] ^= 1;
    std::fs::write(&cpath, &cfg).unwrap();
    assert_eq!(
        err(&o.dir, &Options::default()),
        format!(
            "image config digest mismatch: expected sha256:{want}, got sha256:{}",
            sha(&cfg)
        )
    );
    let mut mb = std::fs::read(&mpath).unwrap();
    let want = sha(&mb);
    let last = mb.len() - 1;
    mb[last] = b' ';
    mb.push(b'}');
    std::fs::write(&mpath, &mb).unwrap();
    assert_eq!(
        err(&o.dir, &Options::default()),
        format!(
            "index.json manifest digest mismatch: expected sha256:{want}, got sha256:{}",
            sha(&mb)
        )
    );
    let (o, l) = oci_one_layer("badlayer", tar_of(&[E::File("x", b"hello")]));
    let bpath = o.path(&l);
    let mut b = std::fs::read(&bpath).unwrap();
    let want = sha(&b);
    let at = b.windows(5).position(|w| w == b"hello").unwrap();
    b[at] = b'j';
    std::fs::write(&bpath, &b).unwrap();
    assert_eq!(
        err(&o.dir, &Options::default()),
        format!(
            "layer 0 (blobs/sha256/{want}) digest mismatch: expected sha256:{want}, got sha256:{}",
            sha(&b)
        )
    );
    // docker-archive: layers are checked against the config's diff_ids.
    let p = docker_archive("docker-badlayer", &[layer0()], |_| {});
    let mut bytes = std::fs::read(&p).unwrap();
    let at = bytes.windows(6).rposition(|w| w == b"compat").unwrap();
    bytes[at] = b'C';
    std::fs::write(&p, &bytes).unwrap();
    let e = err(&p, &Options::default());
    assert!(
        e.starts_with(&format!(
            "layer 0 (l0/layer.tar) diff_id digest mismatch: expected sha256:{}",
            sha(&layer0())
        )),
        "{e}"
    );
}

#[test]
fn hostile_truncated_layer_and_huge_config() {
    let layer = gz(&tar_of(&[E::File(
        "big",
        &(0..200_000u32)
            .flat_map(|i| i.to_le_bytes())
            .collect::<Vec<_>>(),
    )]));
    let (o, l) = oci_one_layer("truncated", layer.clone());
    let h = &l["digest"].as_str().unwrap()[7..];
    let half = layer.len() / 2;
    std::fs::write(o.path(&l), &layer[..half]).unwrap();
    assert_eq!(
        err(&o.dir, &Options::default()),
        format!(
            "layer 0 (blobs/sha256/{h}) is truncated: {half} of {} bytes",
            layer.len()
        )
    );
    // A config over the JSON bound is refused before it is read.
    let o = Oci::new("hugeconfig");
    let big = serde_json::to_vec(
        &serde_json::json!({ "architecture": "amd64", "os": "linux", "pad": "x".repeat(5 << 20) }),
    )
    .unwrap();
    let cfg = o.blob(&big);
    let m = serde_json::json!({ "schemaVersion": 2, "config": cfg, "layers": [] });
    let md = o.blob(&serde_json::to_vec(&m).unwrap());
    o.index(vec![md]);
    assert_eq!(
        err(&o.dir, &Options::default()),
        "image config is larger than the 4194304-byte limit"
    );
    // The descriptor may lie about the size: the read is bounded anyway.
    let mut m = m;
    m["config"]["size"] = 10.into();
    let md = o.blob(&serde_json::to_vec(&m).unwrap());
    o.index(vec![md]);
    let h = &cfg["digest"].as_str().unwrap()[7..];
    assert_eq!(
        err(&o.dir, &Options::default()),
        format!("blobs/sha256/{h} is larger than the 4194304-byte limit")
    );
}

#[test]
fn not_an_image_and_compressed_archive() {
    let d = tmp("notimage");
    std::fs::write(d.join("x.tar.gz"), gz(b"hello")).unwrap();
    assert_eq!(
        err(&d.join("x.tar.gz"), &Options::default()),
        format!(
            "{} is a compressed archive; decompress it first",
            d.join("x.tar.gz").display()
        )
    );
    std::fs::write(d.join("x.txt"), vec![b'x'; 2000]).unwrap();
    assert_eq!(
        err(&d.join("x.txt"), &Options::default()),
        format!(
            "{} is not an OCI image layout, docker-archive or OCI archive",
            d.join("x.txt").display()
        )
    );
    assert_eq!(
        err(&d, &Options::default()),
        format!(
            "{} is not an OCI image layout, docker-archive or OCI archive",
            d.display()
        )
    );
}

#[test]
fn fatbin_bytes_with_a_size_bound() {
    use gpu_guard::image::{scan_fatbin, FatbinScan};
    let o = oci_two_layers("fatbin");
    let img = Image::open(&o.dir, &Options::default()).unwrap();
    let tree = img.index().unwrap();
    let mut out = BTreeMap::new();
    img.read_files(&tree, &libs, &mut |f, r| {
        let mut budget = gpu_guard::scan::fatbin::Budget::unlimited();
        let limit = if f.path.contains("compat") { 3 } else { 1024 };
        let s = match scan_fatbin(r, f.size, limit, &mut budget)? {
            FatbinScan::TooLarge { size, limit } => format!("not judged: {size} > {limit}"),
            FatbinScan::Scanned(r) => format!("{:?}", r.map_err(|e| e.to_string())),
        };
        out.insert(f.path.clone(), s);
        Ok(())
    })
    .unwrap();
    assert_eq!(
        out["usr/lib/libcuda-link.so"],
        "Err(\"not an ELF file or fat binary\")"
    );
    assert_eq!(
        out["usr/local/cuda-12.4/compat/libcuda.so.550.54.15"],
        "not judged: 6 > 3"
    );
}
