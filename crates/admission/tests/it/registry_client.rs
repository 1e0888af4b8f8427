//! The registry client against a real registry (distribution 2.8 on
//! 127.0.0.1, plain and TLS with basic auth; images pushed with skopeo)
//! and against a fake one for the Bearer token flow and blob redirects.

use crate::registry_support::{
    self,
    fake::{Response, Server},
};
use crate::registry_support::{Registry, PASS, USER};
use gpu_guard_registry::{
    client_for, Client, Credential, Options, Platform, Reference, ReferrersSource,
};
use std::io::Read;

const NEEDS: &str = "application/vnd.gpu-guard.needs.v1+json";

fn amd64() -> Platform {
    Platform {
        os: "linux".into(),
        architecture: "amd64".into(),
        variant: None,
    }
}

fn image(dir: &std::path::Path) -> (String, Vec<u8>) {
    let l = registry_support::layer(&[
        ("usr/lib/libfoo.so", b"not really an ELF"),
        ("etc/hello", b"hi"),
    ]);
    (
        registry_support::oci_layout(
            dir,
            &["NVIDIA_REQUIRE_CUDA=cuda>=12.0", "CUDA_VERSION=12.0"],
            std::slice::from_ref(&l),
        ),
        l,
    )
}

/// Takes every attestation layer.
fn any(_: &[u8]) -> Result<(), String> {
    Ok(())
}

fn read_all(mut r: Box<dyn Read + Send>) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    r.read_to_end(&mut v)?;
    Ok(v)
}

#[test]
fn plain_registry_by_tag_and_digest_blobs_and_attestations() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    let dir = crate::support::TempDir::new("img");
    let (digest, layer) = image(&dir);
    reg.push(&dir, "team/cuda-app", "v1");
    let opts = Options {
        plain_http: true,
        ..Options::default()
    };
    let r = Reference::parse(&format!("docker://{}/team/cuda-app:v1", reg.host)).unwrap();
    let c = client_for(&r, opts.clone(), &[]).unwrap();
    let res = c.resolve(&r, &amd64()).unwrap();
    assert_eq!(res.manifest.digest, digest);
    // By digest: the same manifest.
    let rd = Reference::parse(&format!("{}/team/cuda-app@{digest}", reg.host)).unwrap();
    assert_eq!(
        c.resolve(&rd, &amd64()).unwrap().manifest.bytes,
        res.manifest.bytes
    );
    // The layer streams verified.
    let got = read_all(
        c.blob(
            "team/cuda-app",
            &registry_support::sha256(&layer),
            Some(layer.len() as u64),
            true,
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(got, layer);
    // A wrong size in the descriptor is refused while streaming.
    let e = read_all(
        c.blob(
            "team/cuda-app",
            &registry_support::sha256(&layer),
            Some(layer.len() as u64 - 1),
            true,
        )
        .unwrap(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("more than"), "{e}");
    // An unknown tag is a one-line not-found naming the registry.
    let e = c
        .resolve(
            &Reference::parse(&format!("{}/team/cuda-app:nope", reg.host)).unwrap(),
            &amd64(),
        )
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&reg.host) && msg.contains("not found") && !msg.contains('\n'),
        "{msg}"
    );
    // Another platform: named in the error.
    let arm = Platform {
        os: "linux".into(),
        architecture: "arm64".into(),
        variant: None,
    };
    // (a single-platform image resolves to its manifest whatever the platform;
    // the image reader holds the config's platform to --platform)
    assert!(c.resolve(&r, &arm).is_ok());

    // Attestations: none yet, then one through the tag schema (no Referrers API in 2.8).
    assert!(c
        .find_artifact("team/cuda-app", &digest, NEEDS, 1 << 20, &any)
        .artifact
        .is_none());
    let subject = (
        gpu_guard_registry::manifest::OCI_MANIFEST,
        digest.as_str(),
        res.manifest.bytes.len() as u64,
    );
    let (a1, via) = c
        .attach(
            "team/cuda-app",
            subject,
            NEEDS,
            br#"{"n":1}"#,
            "2026-01-01T00:00:00Z",
        )
        .unwrap();
    assert_eq!(via, ReferrersSource::TagSchema);
    let found = c
        .find_artifact("team/cuda-app", &digest, NEEDS, 1 << 20, &any)
        .artifact
        .unwrap();
    assert_eq!(
        (
            found.manifest_digest.as_str(),
            found.layer.as_slice(),
            found.via
        ),
        (a1.as_str(), &br#"{"n":1}"#[..], ReferrersSource::TagSchema)
    );
    // A newer one replaces it; the index at sha256-<hex> lists only the newest.
    let (a2, _) = c
        .attach(
            "team/cuda-app",
            subject,
            NEEDS,
            br#"{"n":2}"#,
            "2026-01-02T00:00:00Z",
        )
        .unwrap();
    let found = c
        .find_artifact("team/cuda-app", &digest, NEEDS, 1 << 20, &any)
        .artifact
        .unwrap();
    assert_eq!(
        (found.manifest_digest, found.layer),
        (a2, br#"{"n":2}"#.to_vec())
    );
    let tag = gpu_guard_registry::referrers::fallback_tag(&digest);
    let idx: serde_json::Value =
        serde_json::from_slice(&c.manifest("team/cuda-app", &tag).unwrap().bytes).unwrap();
    assert_eq!(idx["manifests"].as_array().unwrap().len(), 1);
    // The attestation is for exactly that digest: another image has none.
    let other = crate::support::TempDir::new("img2");
    let d2 =
        registry_support::oci_layout(&other, &["X=1"], &[registry_support::layer(&[("a", b"b")])]);
    reg.push(&other, "team/cuda-app", "v2");
    assert!(c
        .find_artifact("team/cuda-app", &d2, NEEDS, 1 << 20, &any)
        .artifact
        .is_none());
    // A layer over the bound is skipped (with a line saying so), not read.
    let f = c.find_artifact("team/cuda-app", &digest, NEEDS, 4, &any);
    assert!(f.artifact.is_none());
    assert!(
        f.skipped.len() == 1 && f.skipped[0].contains("limit"),
        "{:?}",
        f.skipped
    );
}

#[test]
fn tampered_storage_is_a_digest_mismatch() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    let dir = crate::support::TempDir::new("img");
    let (digest, layer) = image(&dir);
    reg.push(&dir, "x/y", "v1");
    let c = Client::new(
        &reg.host,
        &reg.host,
        Options {
            plain_http: true,
            ..Options::default()
        },
    )
    .unwrap();
    // The layer's bytes changed under the registry (same length).
    let ld = registry_support::sha256(&layer);
    let mut bad = layer.clone();
    let n = bad.len();
    bad[n - 9] ^= 0xff;
    std::fs::write(reg.blob_data(&ld), &bad).unwrap();
    let e = read_all(c.blob("x/y", &ld, Some(layer.len() as u64), true).unwrap()).unwrap_err();
    let e = gpu_guard_registry::blob::into_registry_error(e, &reg.host, "layer");
    let msg = e.to_string();
    assert!(
        msg.contains("digest mismatch") && msg.contains(&reg.host) && msg.contains(&ld),
        "{msg}"
    );
    // The manifest's bytes changed: asked by digest, refused.
    let m = std::fs::read(reg.blob_data(&digest)).unwrap();
    let mut m2 = m.clone();
    m2.push(b' ');
    std::fs::write(reg.blob_data(&digest), &m2).unwrap();
    let e = c.manifest("x/y", &digest).unwrap_err().to_string();
    assert!(e.contains("digest mismatch"), "{e}");
}

#[test]
fn tls_with_basic_auth_credentials_files_and_untrusted_certs() {
    let Some(reg) = Registry::start(true, true) else {
        return;
    };
    let dir = crate::support::TempDir::new("img");
    let (digest, _) = image(&dir);
    reg.push(&dir, "secure/app", "v1");
    let certs = reg.tls.as_ref().unwrap();
    let r = Reference::parse(&format!("docker://{}/secure/app:v1", reg.host)).unwrap();
    // Credentials from a docker config.json (`auth` base64).
    let cfg = dir.join("config.json");
    let b64 = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("{USER}:{PASS}"),
    );
    std::fs::write(
        &cfg,
        format!(
            r#"{{"auths":{{"https://{}":{{"auth":"{b64}"}}}}}}"#,
            reg.host
        ),
    )
    .unwrap();
    let with_ca = Options {
        ca_files: vec![certs.ca.clone()],
        ..Options::default()
    };
    let c = client_for(&r, with_ca.clone(), std::slice::from_ref(&cfg)).unwrap();
    assert_eq!(c.resolve(&r, &amd64()).unwrap().manifest.digest, digest);
    // Wrong credentials: an auth error naming the file.
    let wrong = Options {
        credential: Some(Credential::Basic {
            username: USER.into(),
            password: "wrong".into(),
        }),
        credential_source: Some("/x/auth.json".into()),
        ..with_ca.clone()
    };
    let e = client_for(&r, wrong, &[])
        .unwrap()
        .resolve(&r, &amd64())
        .unwrap_err();
    assert!(e.is_auth(), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&reg.host) && msg.contains("/x/auth.json") && !msg.contains('\n'),
        "{msg}"
    );
    // No credentials at all.
    let e = client_for(&r, with_ca.clone(), &[])
        .unwrap()
        .resolve(&r, &amd64())
        .unwrap_err();
    assert!(
        e.is_auth() && e.to_string().contains("requires credentials"),
        "{e}"
    );
    // Without the CA the certificate is untrusted: a TLS error.
    let e = client_for(&r, Options::default(), std::slice::from_ref(&cfg))
        .unwrap()
        .resolve(&r, &amd64())
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, gpu_guard_registry::RegistryError::Tls { .. }),
        "{msg}"
    );
    assert!(msg.contains(&reg.host) && !msg.contains('\n'), "{msg}");
    // A CA file that is not PEM.
    let junk = dir.join("junk.pem");
    std::fs::write(&junk, "nothing").unwrap();
    let e = client_for(
        &r,
        Options {
            ca_files: vec![junk],
            ..Options::default()
        },
        &[],
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("junk.pem"), "{e}");
    // Pushing an attestation with the same credentials.
    let subject = (
        gpu_guard_registry::manifest::OCI_MANIFEST,
        digest.as_str(),
        1,
    );
    let m = c.manifest("secure/app", &digest).unwrap();
    let subject = (subject.0, subject.1, m.bytes.len() as u64);
    c.attach("secure/app", subject, NEEDS, b"{}", "2026-01-01T00:00:00Z")
        .unwrap();
    assert!(c
        .find_artifact("secure/app", &digest, NEEDS, 1 << 20, &any)
        .artifact
        .is_some());
}

/// The token flow and redirects, against a fake registry: the token
/// service wants Basic credentials; blobs redirect to a storage host that
/// must not see the registry's Authorization header.
#[test]
fn bearer_token_flow_and_redirect_to_storage() {
    let blob = b"layer bytes".to_vec();
    let blob_digest = registry_support::sha256(&blob);
    let storage = Server::start(Box::new({
        let blob = blob.clone();
        move |rq| {
            if rq.headers.contains_key("authorization") {
                return Response::new(400, b"leaked auth");
            }
            Response::new(200, &blob)
        }
    }));
    let tokens = Server::start(Box::new(|rq| {
        let want = format!(
            "Basic {}",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "u:p")
        );
        let ok_scope =
            rq.path.contains("scope=repository%3Aa%2Fb%3Apull") && rq.path.contains("service=fake");
        if rq.headers.get("authorization") == Some(&want) && ok_scope {
            Response::new(200, br#"{"token":"T0K"}"#)
        } else {
            Response::new(401, b"{}")
        }
    }));
    let realm = format!("http://{}/token", tokens.addr);
    let storage_url = format!("http://{}/bucket/obj", storage.addr);
    let manifest = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]}"#.to_vec();
    let reg = Server::start(Box::new({
        let manifest = manifest.clone();
        move |rq| {
            if rq.headers.get("authorization").map(String::as_str) != Some("Bearer T0K") {
                return Response::new(401, b"{}").header(
                    "WWW-Authenticate",
                    &format!(
                        r#"Bearer realm="{realm}",service="fake",scope="repository:a/b:pull""#
                    ),
                );
            }
            if rq.path.starts_with("/v2/a/b/manifests/") {
                return Response::new(200, &manifest)
                    .header("Content-Type", "application/vnd.oci.image.manifest.v1+json");
            }
            if rq.path.starts_with("/v2/a/b/blobs/") {
                return Response::new(307, b"").header("Location", &storage_url);
            }
            Response::new(404, b"")
        }
    }));
    let opts = Options {
        plain_http: true,
        credential: Some(Credential::Basic {
            username: "u".into(),
            password: "p".into(),
        }),
        ..Options::default()
    };
    let c = Client::new(&reg.addr, &reg.addr, opts).unwrap();
    let r = Reference::parse(&format!("{}/a/b:t", reg.addr)).unwrap();
    let res = c.resolve(&r, &amd64()).unwrap();
    assert_eq!(res.manifest.bytes, manifest);
    assert_eq!(
        read_all(
            c.blob("a/b", &blob_digest, Some(blob.len() as u64), true)
                .unwrap()
        )
        .unwrap(),
        blob
    );
    // One token for the scope, reused.
    assert_eq!(tokens.seen().len(), 1);
    assert_eq!(storage.seen().len(), 1);
    // Wrong credentials at the token service: an auth error.
    let bad = Options {
        plain_http: true,
        credential: Some(Credential::Basic {
            username: "u".into(),
            password: "x".into(),
        }),
        ..Options::default()
    };
    let e = Client::new(&reg.addr, &reg.addr, bad)
        .unwrap()
        .resolve(&r, &amd64())
        .unwrap_err();
    assert!(
        e.is_auth() && e.to_string().contains("token service refused"),
        "{e}"
    );
    // Over HTTPS, an http:// realm is refused rather than sent credentials.
    // (checked on the parsed challenge: a TLS client never reaches this fake)
    // A blob the storage serves wrong: a digest mismatch.
    let e = read_all(
        c.blob("a/b", &registry_support::sha256(b"other"), None, true)
            .unwrap(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("digest mismatch"), "{e}");
}
