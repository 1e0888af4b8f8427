//! The webhook over real TLS, with a judge whose answers the test sets:
//! AdmissionReviews for pods with and without GPUs, with an existing
//! affinity, an unreadable image, an image no GPU can run, and malformed
//! bodies. Every patch is applied with the json-patch crate and the
//! resulting affinity is evaluated with Kubernetes' node-affinity rules
//! and validated with the API server's (tests/it/k8s_rules.rs).

use crate::k8s_rules;

use crate::k8s_rules::Labels;
use gpu_guard::core::admission::OnUnreadable;
use gpu_guard_admission::affinity::{expr, term};
use gpu_guard_admission::cache::{Cache, CacheSettings};
use gpu_guard_admission::judge::{ImageJudge, ImageKey, Placement, ReadCtl, ReadInfo};
use gpu_guard_admission::metrics::Metrics;
use gpu_guard_admission::reads::{ReadSettings, Reads};
use gpu_guard_admission::review::Reviewer;
use gpu_guard_admission::server::Shared;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct FakeJudge {
    answers: HashMap<String, Result<Placement, String>>,
    resolves: AtomicUsize,
    judges: AtomicUsize,
}

impl ImageJudge for FakeJudge {
    type Resolved = String;
    type Read = String;
    fn resolve(&self, image: &str, _: &ReadCtl) -> Result<(ImageKey, String), String> {
        self.resolves.fetch_add(1, Ordering::SeqCst);
        match self.answers.get(image) {
            Some(Err(e)) => Err(e.clone()),
            Some(Ok(_)) => Ok((
                ImageKey {
                    registry: "reg.example".into(),
                    repository: image.to_string(),
                    digest: format!("digest-of-{image}"),
                },
                image.to_string(),
            )),
            None => Err(format!("no such image {image}")),
        }
    }
    fn read(&self, image: String, ctl: &ReadCtl) -> Result<String, String> {
        self.judges.fetch_add(1, Ordering::SeqCst);
        if image == "slow:1" {
            let end = Instant::now() + Duration::from_secs(3);
            while Instant::now() < end && !ctl.stopped() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(image)
    }
    fn place(&self, image: &String, _: &[(String, String)]) -> Placement {
        match self.answers.get(image) {
            Some(Ok(p)) => p.clone(),
            _ => Placement::Unplaceable {
                reason: "gone".into(),
            },
        }
    }
    fn info(&self, _: &String) -> ReadInfo {
        ReadInfo::default()
    }
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a server certificate for 127.0.0.1.
pub(crate) fn certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=gg-ca",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
        dir,
    );
    openssl(
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=gpu-guard-admission",
            "-keyout",
            "tls.key",
            "-out",
            "tls.csr",
        ],
        dir,
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            "tls.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            "ext.cnf",
            "-out",
            "tls.pem",
        ],
        dir,
    );
    (dir.join("ca.pem"), dir.join("tls.pem"), dir.join("tls.key"))
}

struct Hook {
    _dir: crate::support::TempDir,
    url: String,
    agent: ureq::Agent,
    judge: Arc<FakeJudge>,
}

fn start(judge: FakeJudge, on_unreadable: OnUnreadable, read_timeout: Duration) -> Option<Hook> {
    if Command::new("openssl").arg("version").output().is_err() {
        assert!(
            std::env::var("GPU_GUARD_CI").as_deref() != Ok("1"),
            "openssl is missing"
        );
        eprintln!("SKIP: openssl is not installed");
        return None;
    }
    let dir = crate::support::TempDir::new("hook");
    let (ca, cert, key) = certs(&dir);
    let tls = gpu_guard_admission::certs::Reloading::new(&cert, &key)
        .unwrap()
        .server_config()
        .unwrap();
    let judge = Arc::new(judge);
    let adm = gpu_guard::core::admission::AdmissionConfig {
        on_unreadable,
        read_timeout_ms: read_timeout.as_millis() as u64,
        cache_entries: 16,
        ..Default::default()
    };
    let metrics = Arc::new(Metrics::default());
    let reads = Arc::new(Reads::new(
        judge.clone(),
        Arc::new(Cache::new(CacheSettings::from_config(&adm))),
        ReadSettings::from_config(&adm),
        metrics.clone(),
    ));
    let rv = Arc::new(Reviewer::new(reads, &adm, metrics.clone()));
    let shared = Shared::new(rv, metrics, 3 << 20);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = gpu_guard_admission::server::bind("127.0.0.1:0")
                .await
                .unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            gpu_guard_admission::server::serve(l, tls, shared).await;
        });
    });
    let addr = rx.recv().unwrap();
    let pem = std::fs::read(&ca).unwrap();
    let roots: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
        .filter_map(|i| match i.unwrap() {
            ureq::tls::PemItem::Certificate(c) => Some(c),
            _ => None,
        })
        .collect();
    let tlsc = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
        .build();
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(tlsc)
        .build()
        .new_agent();
    Some(Hook {
        _dir: dir,
        url: format!("https://{addr}"),
        agent,
        judge,
    })
}

impl Hook {
    fn post(&self, body: &[u8]) -> (u16, serde_json::Value) {
        let r = self
            .agent
            .post(format!("{}/mutate", self.url))
            .header("Content-Type", "application/json")
            .send(body);
        // The server answers 413 from the length and closes while a large
        // body is still being sent: the client then sees the pipe break.
        let mut r = match r {
            Err(ureq::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                return (413, serde_json::Value::Null)
            }
            r => r.unwrap(),
        };
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
        )
    }

    fn healthy(&self) -> bool {
        self.agent
            .get(format!("{}/healthz", self.url))
            .call()
            .is_ok_and(|r| r.status() == 200)
    }

    /// Reviews `pod` and returns the response and the patched pod.
    fn review(&self, pod: &serde_json::Value) -> (serde_json::Value, serde_json::Value) {
        let (status, v) = self.post(&serde_json::to_vec(&review(pod)).unwrap());
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["kind"], "AdmissionReview");
        let resp = v["response"].clone();
        assert_eq!(resp["uid"], "uid-1");
        let mut patched = pod.clone();
        if let Some(p) = resp["patch"].as_str() {
            assert_eq!(resp["patchType"], "JSONPatch");
            let raw = base64_decode(p);
            let patch: json_patch::Patch = serde_json::from_slice(&raw).unwrap();
            json_patch::patch(&mut patched, &patch).unwrap();
            // Nothing but the node affinity and gpu-guard.io annotations changes.
            let ops: Vec<serde_json::Value> = serde_json::from_slice(&raw).unwrap();
            for op in ops {
                let path = op["path"].as_str().unwrap();
                assert!(
                    path.starts_with("/spec/affinity") || path.starts_with("/metadata/annotations"),
                    "{path}"
                );
            }
        }
        (resp, patched)
    }
}

pub(crate) fn base64_decode(s: &str) -> Vec<u8> {
    let table = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => 0,
        }
    };
    let bytes: Vec<u8> = s.bytes().filter(|b| *b != b'=').collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= table(*c) << (18 - 6 * i);
        }
        let k = chunk.len() * 6 / 8;
        out.extend_from_slice(&n.to_be_bytes()[1..1 + k]);
    }
    out
}

pub(crate) fn review(pod: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "uid-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "p", "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": pod, "oldObject": null, "dryRun": false, "options": null
        }
    })
}

fn gpu_pod(image: &str, affinity: Option<serde_json::Value>) -> serde_json::Value {
    let mut p = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [
            {"name": "side", "image": "busybox"},
            {"name": "train", "image": image, "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    });
    if let Some(a) = affinity {
        p["spec"]["affinity"] = a;
    }
    p
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const DRV: &str = "nvidia.com/cuda.driver-version.major";

fn judge() -> FakeJudge {
    let mut answers = HashMap::new();
    answers.insert(
        "reg.example/cuda:12".to_string(),
        Ok(Placement::Terms {
            terms: vec![
                term(vec![expr(DRV, "Gt", &["524"])]),
                term(vec![
                    expr(DRV, "In", &["470"]),
                    expr("gpu-guard.io/brand", "In", &["tesla"]),
                ]),
            ],
            summary: "cuda>=12.0".into(),
            notes: vec!["the image's compiled GPU code is not expressed".into()],
        }),
    );
    answers.insert(
        "reg.example/any:1".to_string(),
        Ok(Placement::Terms {
            terms: vec![],
            summary: "no requirement".into(),
            notes: vec![],
        }),
    );
    answers.insert(
        "reg.example/nowhere:1".to_string(),
        Ok(Placement::Nowhere {
            diagnosis: "no GPU architecture has code for the image (sm_13 only)".into(),
        }),
    );
    answers.insert(
        "reg.example/down:1".to_string(),
        Err("registry reg.example: cannot connect: refused".into()),
    );
    answers.insert(
        "slow:1".to_string(),
        Ok(Placement::Terms {
            terms: vec![],
            summary: "x".into(),
            notes: vec![],
        }),
    );
    FakeJudge {
        answers,
        resolves: AtomicUsize::new(0),
        judges: AtomicUsize::new(0),
    }
}

fn nodes() -> Vec<(&'static str, Labels)> {
    vec![
        ("new-a", labels(&[(DRV, "550"), ("zone", "a")])),
        ("new-b", labels(&[(DRV, "550"), ("zone", "b")])),
        (
            "old-tesla-a",
            labels(&[(DRV, "470"), ("gpu-guard.io/brand", "tesla"), ("zone", "a")]),
        ),
        (
            "old-geforce-a",
            labels(&[
                (DRV, "470"),
                ("gpu-guard.io/brand", "geforce"),
                ("zone", "a"),
            ]),
        ),
        ("cpu-a", labels(&[("zone", "a")])),
    ]
}

fn admitted(pod: &serde_json::Value) -> Vec<&'static str> {
    let terms = &pod["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    assert!(
        k8s_rules::validate(terms).is_empty(),
        "{:?}",
        k8s_rules::validate(terms)
    );
    nodes()
        .into_iter()
        .filter(|(n, l)| k8s_rules::admits(terms, n, l))
        .map(|(n, _)| n)
        .collect()
}

#[test]
fn gpu_pods_get_exact_affinity_and_the_rest_nothing() {
    let Some(h) = start(judge(), OnUnreadable::Allow, Duration::from_secs(2)) else {
        return;
    };
    assert!(h.healthy());
    // No GPUs: allowed, no patch, no image read.
    let cpu = serde_json::json!({"metadata": {"name": "c"}, "spec": {"containers": [{"name": "x", "image": "reg.example/cuda:12"}]}});
    let (resp, patched) = h.review(&cpu);
    assert_eq!(
        (
            resp["allowed"].as_bool(),
            resp.get("patch").is_none() || resp["patch"].is_null()
        ),
        (Some(true), true),
        "{resp}"
    );
    assert_eq!(patched, cpu);
    assert_eq!(h.judge.resolves.load(Ordering::SeqCst), 0);
    // A GPU pod: gpu-guard's terms, annotated.
    let (resp, patched) = h.review(&gpu_pod("reg.example/cuda:12", None));
    assert_eq!(resp["allowed"], true);
    assert_eq!(admitted(&patched), ["new-a", "new-b", "old-tesla-a"]);
    let ann = patched["metadata"]["annotations"]["gpu-guard.io/needs"]
        .as_str()
        .unwrap();
    assert!(ann.contains("train: cuda>=12.0"), "{ann}");
    assert!(
        resp["warnings"][0]
            .as_str()
            .unwrap()
            .contains("not expressed"),
        "{resp}"
    );
    // With the pod's own affinity (zone a OR zone b is its own; both must hold).
    let own = serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}});
    let (_, patched) = h.review(&gpu_pod("reg.example/cuda:12", Some(own)));
    assert_eq!(admitted(&patched), ["new-a", "old-tesla-a"]);
    assert!(
        patched["spec"]["affinity"]["podAntiAffinity"].is_object(),
        "the rest of the affinity is kept"
    );
    // An affinity with nodeAffinity but only preferred terms, and existing annotations.
    let mut p = gpu_pod(
        "reg.example/cuda:12",
        Some(
            serde_json::json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}),
        ),
    );
    p["metadata"]["annotations"] = serde_json::json!({"a/b": "c"});
    let (_, patched) = h.review(&p);
    assert_eq!(admitted(&patched), ["new-a", "new-b", "old-tesla-a"]);
    assert_eq!(patched["metadata"]["annotations"]["a/b"], "c");
    // Cached: the second pod of the same image resolves nothing.
    assert_eq!(h.judge.resolves.load(Ordering::SeqCst), 1);
    assert_eq!(h.judge.judges.load(Ordering::SeqCst), 1);
    // An image allowed anywhere: annotation only, affinity untouched.
    let (resp, patched) = h.review(&gpu_pod("reg.example/any:1", None));
    assert_eq!(resp["allowed"], true);
    assert!(patched["spec"]["affinity"].is_null());
    assert!(patched["metadata"]["annotations"]["gpu-guard.io/needs"].is_string());
    // GPUs requested through the env, in an init container.
    let init = serde_json::json!({"metadata": {"name": "i"}, "spec": {
        "initContainers": [{"name": "prep", "image": "reg.example/nowhere:1", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}],
        "containers": [{"name": "x", "image": "busybox"}]}});
    let (resp, _) = h.review(&init);
    assert_eq!(resp["allowed"], false);
    let msg = resp["status"]["message"].as_str().unwrap();
    assert!(msg.contains("prep") && msg.contains("sm_13"), "{msg}");
}

#[test]
fn unreadable_images_and_contradictions() {
    let Some(h) = start(judge(), OnUnreadable::Allow, Duration::from_secs(1)) else {
        return;
    };
    let (resp, patched) = h.review(&gpu_pod("reg.example/down:1", None));
    assert_eq!(resp["allowed"], true);
    assert!(resp["patch"].is_null());
    assert!(patched["spec"]["affinity"].is_null());
    let w = resp["warnings"][0].as_str().unwrap();
    assert!(
        w.contains("reg.example/down:1") && w.contains("cannot connect"),
        "{w}"
    );
    // Past the deadline: unreadable too, and the server answers in time.
    let t = Instant::now();
    let (resp, _) = h.review(&gpu_pod("slow:1", None));
    assert!(
        t.elapsed() < Duration::from_millis(2500),
        "{:?}",
        t.elapsed()
    );
    assert!(
        resp["warnings"][0].as_str().unwrap().contains("deadline"),
        "{resp}"
    );
    // The pod's own affinity leaves no node for the image: denied.
    let own = serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": DRV, "operator": "In", "values": ["470"]}, {"key": "gpu-guard.io/brand", "operator": "In", "values": ["geforce"]}]}]}}});
    let (resp, _) = h.review(&gpu_pod("reg.example/cuda:12", Some(own)));
    assert_eq!(resp["allowed"], false, "{resp}");
    // Deny mode.
    let Some(d) = start(judge(), OnUnreadable::Deny, Duration::from_secs(1)) else {
        return;
    };
    let (resp, _) = d.review(&gpu_pod("reg.example/down:1", None));
    assert_eq!(resp["allowed"], false);
    assert!(resp["status"]["message"]
        .as_str()
        .unwrap()
        .contains("cannot connect"));
}

#[test]
fn malformed_bodies_and_the_server_stays_healthy() {
    let Some(h) = start(judge(), OnUnreadable::Allow, Duration::from_secs(1)) else {
        return;
    };
    let (s, v) = h.post(b"this is not json");
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["response"]["allowed"], false);
    let (s, _) = h.post(br#"{"apiVersion":"v1","kind":"Pod"}"#);
    assert_eq!(s, 400);
    let (s, _) = h.post(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#);
    assert_eq!(s, 400);
    let (s, _) = h.post(
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":5}}"#,
    );
    assert_eq!(s, 400);
    // 10 MB: refused by length.
    let big = vec![b' '; 10 << 20];
    let (s, _) = h.post(&big);
    assert_eq!(s, 413);
    // Another kind, another operation: allowed untouched.
    let mut r = review(&gpu_pod("reg.example/cuda:12", None));
    r["request"]["kind"]["kind"] = "Deployment".into();
    let (s, v) = h.post(&serde_json::to_vec(&r).unwrap());
    assert_eq!((s, v["response"]["allowed"].as_bool()), (200, Some(true)));
    assert!(v["response"]["patch"].is_null());
    let mut r = review(&gpu_pod("reg.example/cuda:12", None));
    r["request"]["operation"] = "UPDATE".into();
    let (_, v) = h.post(&serde_json::to_vec(&r).unwrap());
    assert!(v["response"]["patch"].is_null());
    // A Pod object that is not a pod: allowed with a warning.
    let mut r = review(&gpu_pod("reg.example/cuda:12", None));
    r["request"]["object"]["spec"]["containers"] = "nope".into();
    let (_, v) = h.post(&serde_json::to_vec(&r).unwrap());
    assert_eq!(v["response"]["allowed"], true);
    assert!(v["response"]["warnings"][0]
        .as_str()
        .unwrap()
        .contains("could not be parsed"));
    // Wrong method and path.
    let r = h.agent.get(format!("{}/mutate", h.url)).call().unwrap();
    assert_eq!(r.status(), 405);
    let r = h.agent.get(format!("{}/other", h.url)).call().unwrap();
    assert_eq!(r.status(), 404);
    // Plain HTTP to the TLS port: no answer, no harm.
    let mut s = std::net::TcpStream::connect(h.url.trim_start_matches("https://")).unwrap();
    use std::io::Write;
    let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    drop(s);
    assert!(h.healthy());
    let (_, patched) = h.review(&gpu_pod("reg.example/cuda:12", None));
    assert_eq!(admitted(&patched), ["new-a", "new-b", "old-tesla-a"]);
    let _ = Mutex::new(0);
}
