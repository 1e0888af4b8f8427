//! `check --image docker://` against hostile registries: one that never
//! answers, a token realm that hangs, a manifest a byte at a time, a layer
//! that goes on past its declared size (all bounded); `--attest` whose
//! upload location leads elsewhere (credentials go only to the registry);
//! and broken attestations beside a real registry's image (skipped, the
//! layers read).

use crate::hook_bin::{bin, config};
use crate::registry_support::hostile::{Act, Hostile, MiniImage, OCI_MANIFEST};
use crate::registry_support::{self, Registry};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const NEEDS: &str = "application/vnd.gpu-guard.needs.v1+json";

/// Runs `check` with `args`, killed after `limit`; its output and time.
fn check(cfg: &Path, args: &[&str], envs: &[(&str, &str)], limit: Duration) -> (Output, Duration) {
    let mut c = Command::new(bin());
    c.arg("--config").arg(cfg).arg("check").args(args);
    c.env("HOME", "/nonexistent")
        .env_remove("DOCKER_CONFIG")
        .env_remove("REGISTRY_AUTH_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        c.env(k, v);
    }
    let t = Instant::now();
    let mut child = c.spawn().unwrap();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = t.elapsed();
    (child.wait_with_output().unwrap(), took)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn image(dir: &Path) -> MiniImage {
    let l = registry_support::layer(&[("etc/hello", b"hi")]);
    let d = registry_support::oci_layout(dir, &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"], &[l]);
    MiniImage::from_layout(dir, &d)
}

#[test]
fn every_read_ends_by_its_deadline() {
    let dir = crate::support::TempDir::new("dl");
    let cfg = config(&dir, &[]);
    let img = image(&dir);
    let stall = Hostile::start(None, Box::new(|_| Act::Stall));
    let realm = Hostile::start(None, Box::new(|_| Act::Stall));
    let realm_url = format!("http://{}/token", realm.addr);
    let token = Hostile::start(
        None,
        Box::new(move |_| {
            Act::Reply(
                401,
                vec![(
                    "WWW-Authenticate".into(),
                    format!("Bearer realm=\"{realm_url}\",service=\"x\""),
                )],
                Vec::new(),
            )
        }),
    );
    let m = img.manifest.clone();
    let drip = Hostile::start(
        None,
        Box::new(move |_| {
            Act::Drip(
                200,
                vec![("Content-Type".into(), OCI_MANIFEST.into())],
                m.clone(),
                1,
                Duration::from_secs(1),
            )
        }),
    );
    let cases = [
        ("never answers", stall.addr.clone()),
        ("token realm hangs", token.addr.clone()),
        ("manifest a byte a second", drip.addr.clone()),
    ];
    let runs: Vec<_> = cases
        .iter()
        .map(|(what, host)| {
            let (cfg, r, what) = (
                cfg.clone(),
                format!("docker://{host}/x/app:1"),
                what.to_string(),
            );
            std::thread::spawn(move || {
                let args = [
                    "--image",
                    &r,
                    "--plain-http",
                    "--read-timeout",
                    "3",
                    "--host",
                ];
                let host = crate::hook_bin::repo_root().join("tests/data/hosts/h100x8.json");
                let mut a: Vec<&str> = args.to_vec();
                let hs = host.to_str().unwrap().to_string();
                a.push(&hs);
                (what, check(&cfg, &a, &[], Duration::from_secs(60)))
            })
        })
        .collect();
    for r in runs {
        let (what, (o, took)) = r.join().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{what}: {err}");
        assert!(took < Duration::from_secs(8), "{what}: {took:?}");
        assert!(
            err.contains("timed out") && err.trim_end().lines().count() == 1,
            "{what}: {err}"
        );
    }
}

/// Without `--read-timeout`, a registry that never answers still fails
/// (the response timeout), not never.
#[test]
fn a_registry_that_never_answers_fails_without_a_timeout_flag() {
    let dir = crate::support::TempDir::new("dl2");
    let cfg = config(&dir, &[]);
    let stall = Hostile::start(None, Box::new(|_| Act::Stall));
    let r = format!("docker://{}/x/app:1", stall.addr);
    let (o, took) = check(
        &cfg,
        &["--image", &r, "--plain-http"],
        &[],
        Duration::from_secs(75),
    );
    assert_eq!(o.status.code(), Some(2), "{took:?}: {}", stderr(&o));
    assert!(took < Duration::from_secs(45), "{took:?}");
    assert!(stderr(&o).contains(&stall.addr), "{}", stderr(&o));
}

/// A layer whose body goes on past the size its descriptor says is
/// refused at the first byte too many, not read to its end.
#[test]
fn a_layer_is_read_no_further_than_its_declared_size() {
    let dir = crate::support::TempDir::new("big");
    let cfg = config(&dir, &[]);
    let img = image(&dir);
    let layer = img
        .blobs
        .keys()
        .find(|d| img.blobs[*d].starts_with(&[0x1f, 0x8b]))
        .unwrap()
        .clone();
    let (served, bytes) = (img.clone(), img.blobs[&layer].clone());
    let reg = Hostile::start(
        None,
        Box::new(move |rq| {
            // The layer as it is, then more without end.
            if rq.path.ends_with(&layer) {
                return Act::Endless(bytes.clone(), 10 << 30, 1 << 30);
            }
            served.answer(rq).unwrap_or(Act::status(404))
        }),
    );
    let r = format!("docker://{}/x/app:1", reg.addr);
    let (o, took) = check(
        &cfg,
        &["--image", &r, "--plain-http"],
        &[],
        Duration::from_secs(120),
    );
    let sent = reg.sent.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("more than"), "{}", stderr(&o));
    assert!(sent < 64 << 20, "{} MiB sent, in {took:?}", sent >> 20);
}

/// The registry wants Basic credentials; its upload location is on
/// another host, or answers 401 there with a realm of its own, or is plain
/// HTTP from an HTTPS registry. The credentials reach the registry only.
#[test]
fn attest_sends_credentials_only_to_the_registry() {
    if !crate::support::have_tool("openssl") {
        return;
    }
    let dir = crate::support::TempDir::new("push");
    let cfg = config(&dir, &[]);
    let img = image(&dir);
    let auth = dir.join("auth.json");
    let basic = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "u:secret");
    let certs = registry_support::make_certs(&dir);
    for (case, tls) in [
        ("relative", false),
        ("other-host", false),
        ("other-401", false),
        ("downgrade", true),
    ] {
        // The other host names a realm on itself.
        let me = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let other = Hostile::start(None, {
            let me = me.clone();
            Box::new(move |rq| match (case, rq.path.starts_with("/token")) {
                ("other-401", false) => {
                    let realm = format!(
                        "Bearer realm=\"http://{}/token\",service=\"x\"",
                        me.lock().unwrap()
                    );
                    Act::Reply(401, vec![("WWW-Authenticate".into(), realm)], vec![])
                }
                (_, true) => Act::ok("application/json", br#"{"token":"t"}"#),
                _ => Act::status(201),
            })
        });
        *me.lock().unwrap() = other.addr.clone();
        let other_addr = other.addr.clone();
        let (served, want) = (img.clone(), format!("Basic {basic}"));
        let reg = Hostile::start(
            tls.then_some((certs.cert.as_path(), certs.key.as_path())),
            Box::new(move |rq| {
                if rq.headers.get("authorization") != Some(&want) {
                    return Act::Reply(
                        401,
                        vec![("WWW-Authenticate".into(), "Basic realm=\"r\"".into())],
                        vec![],
                    );
                }
                let loc = match case {
                    "relative" => "/v2/x/app/blobs/uploads/u1?s=1".to_string(),
                    "downgrade" => format!("http://{other_addr}/up?s=1"),
                    _ => format!("http://{other_addr}/up?s=1"),
                };
                match (rq.method.as_str(), rq.path.as_str()) {
                    ("HEAD", p) if p.contains("/blobs/") => Act::status(404),
                    ("POST", _) => Act::Reply(202, vec![("Location".into(), loc)], vec![]),
                    ("PUT", _) => Act::status(201),
                    _ => served.answer(rq).unwrap_or(Act::status(404)),
                }
            }),
        );
        let (host, name) = (reg.addr.clone(), if tls { "https" } else { "http" });
        std::fs::write(
            &auth,
            format!(r#"{{"auths":{{"{name}://{host}":{{"auth":"{basic}"}}}}}}"#),
        )
        .unwrap();
        let r = format!("docker://{host}/x/app:1");
        let mut args = vec!["--image", &r, "--attest"];
        let ca = certs.ca.to_str().unwrap().to_string();
        if tls {
            args.extend(["--registry-ca", &ca]);
        } else {
            args.push("--plain-http");
        }
        let (o, _) = check(
            &cfg,
            &args,
            &[("REGISTRY_AUTH_FILE", auth.to_str().unwrap())],
            Duration::from_secs(60),
        );
        let leaked: Vec<_> = other
            .seen()
            .into_iter()
            .filter(|q| q.headers.contains_key("authorization"))
            .collect();
        assert!(
            leaked.is_empty(),
            "{case}: credentials sent to another host: {leaked:?}"
        );
        match case {
            "relative" => {
                assert!(
                    o.status.code().is_some_and(|c| c < 2),
                    "{case}: {}",
                    stderr(&o)
                );
                let puts = reg
                    .seen()
                    .into_iter()
                    .filter(|q| {
                        q.method == "PUT" && q.path.starts_with("/v2/x/app/blobs/uploads/u1")
                    })
                    .count();
                assert!(puts >= 1, "{case}");
            }
            "other-host" => {
                assert!(
                    o.status.code().is_some_and(|c| c < 2),
                    "{case}: {}",
                    stderr(&o)
                );
                assert!(
                    other.seen().iter().any(|q| q.method == "PUT"),
                    "{case}: the upload went there"
                );
            }
            "other-401" => {
                assert_eq!(o.status.code(), Some(2), "{case}: {}", stderr(&o));
                assert!(
                    !other.seen().iter().any(|q| q.path.starts_with("/token")),
                    "{case}: its realm was asked"
                );
            }
            _ => {
                assert_eq!(o.status.code(), Some(2), "{case}: {}", stderr(&o));
                assert!(stderr(&o).contains("plain HTTP"), "{case}: {}", stderr(&o));
                assert!(
                    other.seen().is_empty(),
                    "{case}: a plain HTTP request was sent"
                );
            }
        }
    }
}

/// Referrers anyone with push rights can add: one that is not an artifact
/// manifest (an index), one whose layer is over the size bound, and more
/// than the number read. The image is still read, from its layers.
#[test]
fn broken_attestations_are_skipped_and_the_layers_read() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    let dir = crate::support::TempDir::new("att");
    let cfg = config(&dir, &[]);
    let layout = dir.join("l");
    let l = registry_support::layer(&[("etc/hello", b"hi")]);
    let digest = registry_support::oci_layout(&layout, &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"], &[l]);
    reg.push(&layout, "team/app", "1");
    let c = gpu_guard_registry::Client::new(
        &reg.host,
        &reg.host,
        gpu_guard_registry::Options {
            plain_http: true,
            ..Default::default()
        },
    )
    .unwrap();
    let m = c.manifest("team/app", &digest).unwrap();
    let subject = (OCI_MANIFEST, digest.as_str(), m.bytes.len() as u64);
    // A well-formed artifact whose layer is over the readers' bound.
    c.attach(
        "team/app",
        subject,
        NEEDS,
        &vec![b' '; 5 << 20],
        "2026-01-01T00:00:00Z",
    )
    .unwrap();
    // An index (not an artifact manifest) listed as the newest referrers.
    let index = serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": digest, "size": m.bytes.len()}]});
    let ib = serde_json::to_vec(&index).unwrap();
    let (idigest, _) = c
        .put_manifest(
            "team/app",
            "an-index",
            &ib,
            "application/vnd.oci.image.index.v1+json",
        )
        .unwrap();
    let tag = gpu_guard_registry::referrers::fallback_tag(&digest);
    let mut refs: serde_json::Value =
        serde_json::from_slice(&c.manifest("team/app", &tag).unwrap().bytes).unwrap();
    for i in 0..12 {
        refs["manifests"].as_array_mut().unwrap().push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.index.v1+json", "digest": idigest, "size": ib.len(),
            "artifactType": NEEDS, "annotations": {"org.opencontainers.image.created": format!("2026-02-{:02}T00:00:00Z", i + 1)}}));
    }
    c.put_manifest(
        "team/app",
        &tag,
        &serde_json::to_vec(&refs).unwrap(),
        "application/vnd.oci.image.index.v1+json",
    )
    .unwrap();
    let host = crate::hook_bin::repo_root().join("tests/data/hosts/h100x8.json");
    let r = format!("docker://{}/team/app:1", reg.host);
    let args = [
        "--image",
        &r,
        "--plain-http",
        "--host",
        host.to_str().unwrap(),
        "--json",
    ];
    let (o, _) = check(&cfg, &args, &[], Duration::from_secs(60));
    let err = stderr(&o);
    assert!(o.status.code().is_some_and(|c| c < 2), "{err}");
    assert!(err.contains("only the newest 8"), "{err}");
    assert!(err.contains("skipped"), "{err}");
    let local = layout.to_str().unwrap();
    let (lo, _) = check(
        &cfg,
        &["--image", local, "--host", host.to_str().unwrap(), "--json"],
        &[],
        Duration::from_secs(60),
    );
    let strip = |o: &Output| {
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_object_mut().map(|m| m.remove("image"));
        v
    };
    assert_eq!(
        strip(&o),
        strip(&lo),
        "the same decision as the image's layout"
    );
}
