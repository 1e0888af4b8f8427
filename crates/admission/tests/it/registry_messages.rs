//! The messages a person reads first when a registry read goes wrong,
//! through the real binary: a registry reached with the wrong scheme
//! (HTTPS to an HTTP-only registry, `--plain-http` to an HTTPS one, a
//! server that speaks neither) names the switch to change, for `check`
//! and for the webhook's judge; a registry document that does not decode
//! (manifest, index, referrers index, config) is named with its fault;
//! a reference by digest prints as `repo@digest`.

use crate::hook_bin::{bin, config};
use crate::registry_support::hostile::{Act, Hostile, MiniImage};
use crate::registry_support::{self, Registry};
use gpu_guard_admission::judge::{ImageJudge, ReadCtl};
use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn check(cfg: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("--config")
        .arg(cfg)
        .arg("check")
        .args(args)
        .env("HOME", "/nonexistent")
        .env_remove("DOCKER_CONFIG")
        .env_remove("REGISTRY_AUTH_FILE")
        .output()
        .unwrap()
}

/// Exit 2 and one stderr line holding every needle and none of `not`.
fn one_line(o: &Output, needles: &[&str], not: &[&str]) -> String {
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err}");
    }
    for n in not {
        assert!(!err.contains(n), "{n:?} in {err}");
    }
    err
}

const LOW_LEVEL: &[&str] = &["InvalidContentType", "corrupt message", "serde failed"];

#[test]
fn an_http_only_registry_read_over_https_names_plain_http() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    let dir = crate::support::TempDir::new("msg-http");
    let cfg = config(&dir, &[]);
    let r = format!("docker://{}/team/app:1", reg.host);
    let o = check(&cfg, &["--image", &r]);
    one_line(
        &o,
        &[
            &reg.host,
            "the server gave an HTTP response to an HTTPS client",
            "--plain-http",
            "[admission] plain_http_registries",
        ],
        LOW_LEVEL,
    );
    // The webhook's judge, with the registry not listed as plain HTTP:
    // the same cause, naming the config key.
    let c = gpu_guard::config::load(Some(&cfg)).unwrap();
    assert!(c.admission.plain_http_registries.is_empty());
    let j = gpu_guard_admission::webhook::RegistryJudge::new(c).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let err = j
        .resolve(&format!("{}/team/app:1", reg.host), &ReadCtl::new(deadline))
        .err()
        .expect("an HTTPS read of an HTTP-only registry fails");
    assert!(
        err.contains("HTTP response to an HTTPS client")
            && err.contains(&format!(
                "\"{}\" in [admission] plain_http_registries",
                reg.host
            )),
        "{err}"
    );
}

#[test]
fn plain_http_to_an_https_registry_says_it_speaks_https() {
    // distribution is a Go server: `Client sent an HTTP request to an HTTPS server.`
    if let Some(reg) = Registry::start(true, false) {
        let dir = crate::support::TempDir::new("msg-https");
        let cfg = config(&dir, &[]);
        let r = format!("docker://{}/team/app:1", reg.host);
        let o = check(&cfg, &["--image", &r, "--plain-http"]);
        one_line(
            &o,
            &[&reg.host, "speaks HTTPS", "without --plain-http"],
            &["HTTP 400"],
        );
    }
    // nginx's page for a plain request on its TLS port (code 497).
    let nginx = Hostile::start(
        None,
        Box::new(|_| {
            Act::Reply(
                400,
                vec![("Content-Type".into(), "text/html".into())],
                b"<html><center>The plain HTTP request was sent to HTTPS port</center></html>"
                    .to_vec(),
            )
        }),
    );
    let dir = crate::support::TempDir::new("msg-nginx");
    let cfg = config(&dir, &[]);
    let r = format!("docker://{}/team/app:1", nginx.addr);
    let o = check(&cfg, &["--image", &r, "--plain-http"]);
    one_line(
        &o,
        &[&nginx.addr, "speaks HTTPS", "without --plain-http"],
        &["HTTP 400"],
    );
    // A 400 for another reason stays what the registry said.
    let other = Hostile::start(None, Box::new(|_| Act::status(400)));
    let r = format!("docker://{}/team/app:1", other.addr);
    let o = check(&cfg, &["--image", &r, "--plain-http"]);
    one_line(&o, &["HTTP 400"], &["speaks HTTPS"]);
}

/// A server that speaks neither TLS nor HTTP (an SSH banner): not called
/// an HTTP server, but the plain-HTTP switch is still named.
#[test]
fn a_server_that_is_not_tls_is_named_so() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut s = s;
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n");
        }
    });
    let dir = crate::support::TempDir::new("msg-ssh");
    let cfg = config(&dir, &[]);
    let r = format!("docker://{addr}/team/app:1");
    let o = check(&cfg, &["--image", &r, "--read-timeout", "20"]);
    one_line(
        &o,
        &[&addr, "does not speak TLS", "--plain-http"],
        &["HTTP response"],
    );
}

/// A registry serving `image`'s blobs, with `doc(path)` answering first
/// (a manifest or referrers document of the test's choosing); the
/// Referrers API is absent (404), as on distribution 2.8.
fn serving(
    image: MiniImage,
    doc: impl Fn(&str) -> Option<(&'static str, Vec<u8>)> + Send + Sync + 'static,
) -> Hostile {
    Hostile::start(
        None,
        Box::new(move |rq| {
            if let Some((ctype, body)) = doc(&rq.path) {
                return Act::ok(ctype, &body);
            }
            if rq.path.contains("/referrers/") || rq.path.contains("/manifests/sha256-") {
                return Act::status(404);
            }
            image.answer(rq).unwrap_or(Act::status(404))
        }),
    )
}

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// Registry documents that do not decode: one line naming the document
/// (manifest, index, referrers index, config) and what is wrong with it,
/// with the registry's bytes escaped; never `serde failed`. A malformed
/// referrers tag only skips the attestation: the layers are read.
#[test]
fn malformed_registry_documents_are_named_with_their_fault() {
    let dir = crate::support::TempDir::new("msg-docs");
    let cfg = config(&dir, &[]);
    let layer = registry_support::layer(&[("etc/hello", b"hi")]);
    let digest = registry_support::oci_layout(
        &dir.join("l"),
        &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"],
        std::slice::from_ref(&layer),
    );
    let image = MiniImage::from_layout(&dir.join("l"), &digest);
    let host = crate::hook_bin::repo_root().join("tests/data/hosts/h100x8.json");
    let host = host.to_str().unwrap().to_string();
    let read = |reg: &Hostile| {
        let r = format!("docker://{}/x/app:1", reg.addr);
        check(&cfg, &["--image", &r, "--plain-http", "--host", &host])
    };

    // A referrers tag whose index has a string for `manifests`, with an
    // escape sequence in it.
    let reg = serving(image.clone(), |p| {
        p.contains("/manifests/sha256-").then(|| {
            (
                OCI_INDEX,
                br#"{"schemaVersion":2,"manifests":"\u001b[31mred\\"}"#.to_vec(),
            )
        })
    });
    let o = read(&reg);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.code().is_some_and(|c| c < 2), "{err}");
    let tag = gpu_guard_registry::referrers::fallback_tag(&digest);
    let line = err
        .lines()
        .find(|l| l.contains("referrers"))
        .unwrap_or_else(|| panic!("no referrers line in {err}"));
    for n in [
        &format!("referrers index {tag} (tag schema)"),
        "not a valid image index",
        "invalid type: string",
    ] {
        assert!(line.contains(n), "{n:?} not in {line}");
    }
    assert!(
        !err.contains('\x1b') && !err.contains("serde failed"),
        "{err}"
    );

    // The image's own documents: exit 2, one line each.
    let cases: [(&str, &str, Vec<u8>, &[&str]); 3] = [
        (
            "a manifest whose config is a number",
            "application/vnd.oci.image.manifest.v1+json",
            br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":5,"layers":[]}"#.to_vec(),
            &["manifest x/app@sha256:", "not a valid image manifest", "invalid type: integer `5`"],
        ),
        (
            "an index entry without a digest",
            OCI_INDEX,
            br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":3}]}"#.to_vec(),
            &["manifest x/app@sha256:", "not a valid image index", "missing field `digest`"],
        ),
        (
            "not JSON",
            "application/vnd.oci.image.manifest.v1+json",
            b"<html>\x1b]0;owned\x07</html>".to_vec(),
            &["manifest x/app@sha256:", "not valid JSON (image manifest or index expected)"],
        ),
    ];
    for (what, ctype, body, needles) in cases {
        let reg = serving(image.clone(), move |p| {
            p.ends_with("/manifests/1").then(|| (ctype, body.clone()))
        });
        let o = read(&reg);
        let err = one_line(&o, needles, LOW_LEVEL);
        assert!(
            !err.contains('\x1b') && !err.contains('\x07'),
            "{what}: {err}"
        );
    }

    // An image config that is JSON but not an image config.
    let config =
        br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":"x"}}"#;
    let cdigest = registry_support::sha256(config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdigest, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": registry_support::sha256(&layer), "size": layer.len()}],
    }))
    .unwrap();
    let mut bad = image.clone();
    bad.blobs.insert(cdigest, config.to_vec());
    bad.digest = registry_support::sha256(&manifest);
    bad.manifest = manifest;
    let reg = serving(bad, |_| None);
    let o = read(&reg);
    one_line(
        &o,
        &["image config is not valid", "invalid type: string \"x\""],
        LOW_LEVEL,
    );
}

/// A reference by digest prints as `repo@sha256:...`, never `repo:sha256:...`,
/// in the registry's messages (a manifest not found, one that does not
/// decode), as docker and skopeo print it.
#[test]
fn a_digest_reference_prints_with_an_at_sign() {
    let dir = crate::support::TempDir::new("msg-at");
    let cfg = config(&dir, &[]);
    let missing = format!("sha256:{}", "0".repeat(64));
    let reg = Hostile::start(None, Box::new(|_| Act::status(404)));
    let r = format!("docker://{}/team/app@{missing}", reg.addr);
    let o = check(&cfg, &["--image", &r, "--plain-http"]);
    one_line(
        &o,
        &[&format!("manifest team/app@{missing} not found")],
        &["app:sha256"],
    );
    // By tag, the tag keeps its colon.
    let r = format!("docker://{}/team/app:v1", reg.addr);
    let o = check(&cfg, &["--image", &r, "--plain-http"]);
    one_line(&o, &["manifest team/app:v1 not found"], &["app@v1"]);
}
