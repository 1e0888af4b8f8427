//! The real webhook: `gpu-guard-admission --config FILE admission --listen
//! 127.0.0.1:PORT --tls-cert --tls-key [--metrics-listen 127.0.0.1:PORT]`
//! started as a process, its config the shipped one with `[admission]`
//! keys set by the test, called over TLS as the API server calls it.
//! `GPU_GUARD_TEST_BIN_DIR` runs another build of it (tests/support).

use crate::registry_support;
use crate::support::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    crate::support::under_test(
        "gpu-guard-admission",
        option_env!("CARGO_BIN_EXE_gpu-guard-admission"),
    )
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The shipped config with `[admission]` keys replaced (each must exist there).
pub fn config(dir: &Path, keys: &[(&str, String)]) -> PathBuf {
    let text = std::fs::read_to_string(repo_root().join("config/config.toml")).unwrap();
    let start = text
        .find("\n[admission]\n")
        .expect("an [admission] section");
    let (head, tail) = text.split_at(start);
    let mut tail = tail.to_string();
    for (k, v) in keys {
        let needle = format!("\n{k} = ");
        let at = tail
            .find(&needle)
            .unwrap_or_else(|| panic!("no {k} in [admission]"));
        let end = tail[at + 1..]
            .find('\n')
            .map(|e| at + 1 + e)
            .unwrap_or(tail.len());
        tail.replace_range(at + 1..end, &format!("{k} = {v}"));
    }
    let p = dir.join("config.toml");
    std::fs::write(&p, format!("{head}{tail}")).unwrap();
    p
}

/// A TLS client trusting `ca`.
pub fn agent(ca: &Path) -> ureq::Agent {
    let pem = std::fs::read(ca).unwrap();
    let roots: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
        .filter_map(|i| match i.unwrap() {
            ureq::tls::PemItem::Certificate(c) => Some(c),
            _ => None,
        })
        .collect();
    let tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
        .build();
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(tls)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .new_agent()
}

pub struct Hook {
    child: Child,
    pub dir: TempDir,
    pub url: String,
    pub metrics_url: String,
    pub agent: ureq::Agent,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub log: PathBuf,
}

impl Hook {
    /// None (after a SKIP line) without openssl.
    pub fn start(keys: &[(&str, String)]) -> Option<Hook> {
        Hook::start_with(keys, false)
    }

    /// With `--metrics-listen` on a port of its own when `plain_metrics`.
    pub fn start_with(keys: &[(&str, String)], plain_metrics: bool) -> Option<Hook> {
        if !crate::support::have_tool("openssl") {
            return None;
        }
        let dir = crate::support::TempDir::new("hookbin");
        let (ca, cert, key) = crate::webhook::certs(&dir);
        let cfg = config(&dir, keys);
        let (port, mport) = (registry_support::free_port(), registry_support::free_port());
        let log = dir.join("hook.log");
        let mut cmd = Command::new(bin());
        cmd.arg("--config")
            .arg(&cfg)
            .args(["admission", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key);
        if plain_metrics {
            cmd.args(["--metrics-listen", &format!("127.0.0.1:{mport}")]);
        }
        let child = cmd
            .env("HOME", "/nonexistent")
            .env_remove("DOCKER_CONFIG")
            .env_remove("REGISTRY_AUTH_FILE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the webhook starts");
        let h = Hook {
            child,
            url: format!("https://127.0.0.1:{port}"),
            metrics_url: format!("http://127.0.0.1:{mport}"),
            agent: agent(&ca),
            ca,
            cert,
            key,
            log,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !h.healthy() {
            assert!(
                Instant::now() < deadline,
                "the webhook did not start: {}",
                h.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(h)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn healthy(&self) -> bool {
        self.agent
            .get(format!("{}/healthz", self.url))
            .call()
            .is_ok_and(|r| r.status() == 200)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `/metrics` over TLS.
    pub fn metrics(&self) -> String {
        self.agent
            .get(format!("{}/metrics", self.url))
            .call()
            .ok()
            .filter(|r| r.status() == 200)
            .map(|mut r| r.body_mut().read_to_string().unwrap_or_default())
            .unwrap_or_default()
    }

    /// `/metrics` over plain HTTP (`--metrics-listen`).
    pub fn plain_metrics(&self) -> String {
        ureq::get(format!("{}/metrics", self.metrics_url))
            .call()
            .map(|mut r| r.body_mut().read_to_string().unwrap_or_default())
            .unwrap_or_default()
    }

    /// One sample of `/metrics` (`name{labels}` as written), 0 when absent.
    pub fn metric(&self, sample: &str) -> f64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }

    /// A kernel memory figure of the webhook (`VmRSS`, `VmHWM`) in KiB.
    pub fn mem_kib(&self, field: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        s.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    /// Posts a review of `pod`; the response, the patched pod, and how long it took.
    pub fn review(
        &self,
        pod: &serde_json::Value,
    ) -> (serde_json::Value, serde_json::Value, Duration) {
        let body = serde_json::to_vec(&crate::webhook::review(pod)).unwrap();
        let t = Instant::now();
        let mut r = self
            .agent
            .post(format!("{}/mutate", self.url))
            .header("Content-Type", "application/json")
            .send(&body[..])
            .unwrap();
        let took = t.elapsed();
        assert_eq!(r.status(), 200, "{}", self.log_text());
        let v: serde_json::Value =
            serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        let resp = v["response"].clone();
        let mut patched = pod.clone();
        if let Some(p) = resp["patch"].as_str() {
            let raw = crate::webhook::base64_decode(p);
            let patch: json_patch::Patch = serde_json::from_slice(&raw).unwrap();
            json_patch::patch(&mut patched, &patch).unwrap();
        }
        (resp, patched, took)
    }
}

impl Drop for Hook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pod whose containers (name, image, env) all ask for a GPU.
pub fn pod(name: &str, containers: &[(&str, &str, serde_json::Value)]) -> serde_json::Value {
    let cs: Vec<serde_json::Value> = containers
        .iter()
        .map(|(n, i, env)| {
            let mut c = serde_json::json!({"name": n, "image": i,
                "resources": {"limits": {"nvidia.com/gpu": "1"}}});
            if !env.is_null() {
                c["env"] = env.clone();
            }
            c
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": cs}})
}

/// The required node-selector terms of a patched pod.
pub fn terms(patched: &serde_json::Value) -> serde_json::Value {
    patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .clone()
}

/// Whether the patched pod may go to a node with these labels (no terms: any).
pub fn admits(patched: &serde_json::Value, labels: &crate::k8s_rules::Labels) -> bool {
    let t = terms(patched);
    if t.is_null() {
        return true;
    }
    assert!(crate::k8s_rules::validate(&t).is_empty(), "{t}");
    crate::k8s_rules::admits(&t, "node", labels)
}

/// An image in `reg` at `repo:tag` with `env` and a small layer; its digest.
pub fn push_image(reg: &registry_support::Registry, repo: &str, tag: &str, env: &[&str]) -> String {
    let dir = crate::support::TempDir::new("img");
    let l = registry_support::layer(&[("etc/hello", format!("{repo}:{tag}").as_bytes())]);
    let d = registry_support::oci_layout(&dir, env, &[l]);
    reg.push(&dir, repo, tag);
    d
}
