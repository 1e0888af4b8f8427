//! Test support: a real registry (Debian's `docker-registry`, distribution
//! 2.8) on 127.0.0.1 with its own config and storage in a temp dir, plain or
//! TLS with htpasswd auth; test images written as OCI layouts and pushed
//! with `skopeo copy`. A missing tool is a SKIP with the reason, and a
//! failure under GPU_GUARD_CI=1 (tests/support's rule).
#![allow(dead_code)]

pub mod fake;
pub mod hostile;

use crate::support::{have_tool, TempDir};
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub const USER: &str = "gguser";
pub const PASS: &str = "ggpass-1";

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A CA and a server certificate for 127.0.0.1 signed by it.
pub struct Certs {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A directory holding `ca.crt`, for skopeo's --dest-cert-dir.
    pub cert_dir: PathBuf,
}

pub fn make_certs(dir: &Path) -> Certs {
    let p = |n: &str| dir.join(n);
    run(Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=gg-test-ca",
        ])
        .arg("-keyout")
        .arg(p("ca.key"))
        .arg("-out")
        .arg(p("ca.pem")));
    run(Command::new("openssl")
        .args([
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
        ])
        .arg("-keyout")
        .arg(p("server.key"))
        .arg("-out")
        .arg(p("server.csr")));
    std::fs::write(p("ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n").unwrap();
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-CAcreateserial"])
        .arg("-in")
        .arg(p("server.csr"))
        .arg("-CA")
        .arg(p("ca.pem"))
        .arg("-CAkey")
        .arg(p("ca.key"))
        .arg("-extfile")
        .arg(p("ext.cnf"))
        .arg("-out")
        .arg(p("server.pem")));
    let cert_dir = p("certs.d");
    std::fs::create_dir_all(&cert_dir).unwrap();
    std::fs::copy(p("ca.pem"), cert_dir.join("ca.crt")).unwrap();
    Certs {
        ca: p("ca.pem"),
        cert: p("server.pem"),
        key: p("server.key"),
        cert_dir,
    }
}

/// A running docker-registry; killed on drop.
pub struct Registry {
    child: Child,
    pub dir: TempDir,
    pub host: String,
    pub tls: Option<Certs>,
    pub auth: bool,
    pub log: PathBuf,
}

impl Registry {
    /// None (after a SKIP line) when docker-registry or skopeo is missing.
    pub fn start(tls: bool, auth: bool) -> Option<Registry> {
        if !have_tool("docker-registry")
            || !have_tool("skopeo")
            || (auth && !have_tool("htpasswd"))
            || (tls && !have_tool("openssl"))
        {
            return None;
        }
        let dir = TempDir::new(if tls { "tls" } else { "plain" });
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let certs = tls.then(|| make_certs(&dir));
        let mut cfg = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n",
            dir.join("data").display()
        );
        if let Some(c) = &certs {
            cfg += &format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                c.cert.display(),
                c.key.display()
            );
        }
        if auth {
            run(Command::new("htpasswd")
                .args(["-Bbc"])
                .arg(dir.join("htpasswd"))
                .args([USER, PASS]));
            cfg += &format!(
                "auth:\n  htpasswd:\n    realm: gg-test\n    path: {}\n",
                dir.join("htpasswd").display()
            );
        }
        std::fs::write(dir.join("config.yml"), cfg).unwrap();
        let log = dir.join("registry.log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.join("registry.err")).unwrap())
            .spawn()
            .expect("docker-registry starts");
        let r = Registry {
            child,
            dir,
            host,
            tls: certs,
            auth,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&r.host).is_err() {
            assert!(
                Instant::now() < deadline,
                "the registry did not listen: {}",
                std::fs::read_to_string(r.dir.join("registry.err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(r)
    }

    /// Pushes an OCI layout's image to `repo:tag` with skopeo.
    pub fn push(&self, layout: &Path, repo: &str, tag: &str) {
        let mut c = Command::new("skopeo");
        c.args(["copy", "--quiet", "--format", "oci"]);
        match &self.tls {
            Some(t) => {
                c.arg("--dest-cert-dir").arg(&t.cert_dir);
            }
            None => {
                c.arg("--dest-tls-verify=false");
            }
        }
        if self.auth {
            c.arg("--dest-creds").arg(format!("{USER}:{PASS}"));
        }
        c.arg(format!("oci:{}", layout.display()))
            .arg(format!("docker://{}/{repo}:{tag}", self.host));
        run(&mut c);
    }

    /// Access-log lines (stderr, where distribution logs) that match `needle`.
    pub fn log_lines(&self, needle: &str) -> usize {
        let text = std::fs::read_to_string(self.dir.join("registry.err")).unwrap_or_default()
            + &std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().filter(|l| l.contains(needle)).count()
    }

    /// The storage file of a blob, to tamper with.
    pub fn blob_data(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir.join(format!(
            "data/docker/registry/v2/blobs/sha256/{}/{hex}/data",
            &hex[..2]
        ))
    }

    pub fn base_url(&self) -> String {
        format!(
            "{}://{}",
            if self.tls.is_some() { "https" } else { "http" },
            self.host
        )
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn sha256(b: &[u8]) -> String {
    gpu_guard_registry::blob::sha256_digest(b)
}

/// A gzip tar layer holding `files` (path, bytes).
pub fn layer(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for (p, b) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(b.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, p, *b).unwrap();
    }
    let raw = tar.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).unwrap();
    gz.finish().unwrap()
}

/// Writes an OCI layout with one image (env, layers) at `dir`; returns the manifest digest.
pub fn oci_layout(dir: &Path, env: &[&str], layers: &[Vec<u8>]) -> String {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |b: &[u8]| {
        let d = sha256(b);
        std::fs::write(blobs.join(d.strip_prefix("sha256:").unwrap()), b).unwrap();
        d
    };
    let diff_ids: Vec<String> = layers
        .iter()
        .map(|l| {
            let mut raw = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&l[..]), &mut raw)
                .unwrap();
            sha256(&raw)
        })
        .collect();
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": { "Env": env },
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
    });
    let cb = serde_json::to_vec(&config).unwrap();
    let cd = put(&cb);
    let ls: Vec<serde_json::Value> = layers
        .iter()
        .map(|l| serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": put(l), "size": l.len()}))
        .collect();
    let m = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cb.len()},
        "layers": ls,
    });
    let mb = serde_json::to_vec(&m).unwrap();
    let md = put(&mb);
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": mb.len(),
         "platform": {"os": "linux", "architecture": "amd64"}}]});
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    md
}
