//! `check --image docker://...` against a real registry (distribution 2.8 on
//! 127.0.0.1, images pushed with skopeo): the same decision as the image's
//! OCI layout, by tag and by digest; one-line exit 2 for wrong credentials,
//! an unknown tag, an untrusted certificate and a digest mismatch; the
//! attestation round trip, after which a read fetches no layer blob (the
//! registry's access log counts them); the webhook's judge on the same image.

use crate::k8s_rules;
use crate::registry_support;
use gpu_guard_admission::judge::ReadCtl;

use crate::registry_support::Registry;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

static NET: std::sync::LazyLock<&str> = std::sync::LazyLock::new(crate::hook_bin::bin);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn data(p: &str) -> PathBuf {
    repo_root().join("tests/data").join(p)
}

fn env_of(name: &str) -> Vec<String> {
    std::fs::read_to_string(data(&format!("images/{name}.env")))
        .unwrap()
        .lines()
        .filter(|l| l.contains('=') && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// An image with GPU code in a default-glob library and its requirement env.
fn gpu_image(dir: &Path) -> (String, Vec<Vec<u8>>) {
    let lib = std::fs::read(data("fatbin/multi-arch.so")).unwrap();
    let l1 = registry_support::layer(&[
        ("usr/local/cuda-12.4/lib64/libcublas.so.12.4.5", &lib),
        ("etc/os-release", b"ID=test"),
    ]);
    let l2 = registry_support::layer(&[("usr/share/doc/x", b"doc")]);
    let env = env_of("cuda-12.4.1-base-ubuntu2204");
    let env: Vec<&str> = env.iter().map(String::as_str).collect();
    let layers = vec![l1, l2];
    (registry_support::oci_layout(dir, &env, &layers), layers)
}

fn config(dir: &Path) -> PathBuf {
    // The shipped config, without the host probe's cache paths mattering.
    let p = dir.join("config.toml");
    std::fs::copy(repo_root().join("config/config.toml"), &p).unwrap();
    p
}

fn check(cfg: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(*NET);
    c.arg("--config").arg(cfg).arg("check").args(args);
    c.env("HOME", "/nonexistent")
        .env_remove("DOCKER_CONFIG")
        .env_remove("REGISTRY_AUTH_FILE");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn decision(o: &Output) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    v
}

/// The per-host results without the `image` object (which names the source).
fn results(v: &serde_json::Value) -> serde_json::Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("image");
    }
    v
}

fn one_line_exit_2(o: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err}");
    }
}

#[test]
fn same_decision_as_the_layout_by_tag_and_digest_then_attested() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    let dir = crate::support::TempDir::new("chk");
    let layout = dir.join("layout");
    let (digest, layers) = gpu_image(&layout);
    reg.push(&layout, "team/cuda", "12.4");
    let cfg = config(&dir);
    let nodes = data("nodes/fleet.json");
    let host = data("hosts/h100x8.json");
    let local = check(
        &cfg,
        &[
            "--image",
            layout.to_str().unwrap(),
            "--nodes",
            nodes.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert!(
        local.status.code().is_some_and(|c| c < 2),
        "{}",
        String::from_utf8_lossy(&local.stderr)
    );
    let by_tag_ref = format!("docker://{}/team/cuda:12.4", reg.host);
    let by_digest_ref = format!("docker://{}/team/cuda@{digest}", reg.host);
    for r in [&by_tag_ref, &by_digest_ref] {
        let o = check(
            &cfg,
            &[
                "--image",
                r,
                "--plain-http",
                "--nodes",
                nodes.to_str().unwrap(),
                "--json",
            ],
            &[],
        );
        assert_eq!(
            o.status.code(),
            local.status.code(),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(results(&decision(&o)), results(&decision(&local)));
        assert_eq!(decision(&o)["image"]["manifest_digest"], digest);
    }
    // `gpu-guard check` hands docker:// images to gpu-guard-admission beside it.
    let main_bin = Path::new(*NET).with_file_name("gpu-guard");
    if main_bin.exists() {
        let o = Command::new(&main_bin)
            .arg("--config")
            .arg(&cfg)
            .args([
                "check",
                "--image",
                &by_tag_ref,
                "--plain-http",
                "--nodes",
                nodes.to_str().unwrap(),
                "--json",
            ])
            .env("HOME", "/nonexistent")
            .output()
            .unwrap();
        assert_eq!(results(&decision(&o)), results(&decision(&local)));
        let o = Command::new(&main_bin)
            .arg("--config")
            .arg(&cfg)
            .args(["check", "--image", layout.to_str().unwrap(), "--attest"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "--attest on a file is bad usage");
    } else {
        assert!(
            std::env::var("GPU_GUARD_CI").as_deref() != Ok("1"),
            "{} is not built",
            main_bin.display()
        );
        eprintln!(
            "SKIP (part): {} is not built (cargo build --bin gpu-guard)",
            main_bin.display()
        );
    }
    // One host: the same Decision.
    let l1 = check(
        &cfg,
        &[
            "--image",
            layout.to_str().unwrap(),
            "--host",
            host.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    let r1 = check(
        &cfg,
        &[
            "--image",
            &by_tag_ref,
            "--plain-http",
            "--host",
            host.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert_eq!(
        (decision(&r1), r1.status.code()),
        (decision(&l1), l1.status.code())
    );

    // Layer blobs fetched so far, from the registry's access log.
    let layer_gets = |reg: &Registry| {
        layers
            .iter()
            .map(|l| {
                reg.log_lines(&format!(
                    "GET /v2/team/cuda/blobs/{}",
                    registry_support::sha256(l)
                ))
            })
            .sum::<usize>()
    };
    let before = layer_gets(&reg);
    assert!(
        before >= 2,
        "the layers were read from the registry ({before} GETs)"
    );
    // Attest, then read again: the attestation is used and no layer is fetched.
    let a = check(
        &cfg,
        &[
            "--image",
            &by_tag_ref,
            "--plain-http",
            "--attest",
            "--nodes",
            nodes.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert!(
        String::from_utf8_lossy(&a.stderr).contains("tag schema"),
        "{}",
        String::from_utf8_lossy(&a.stderr)
    );
    let after_attest = layer_gets(&reg);
    let o = check(
        &cfg,
        &[
            "--image",
            &by_tag_ref,
            "--plain-http",
            "--nodes",
            nodes.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    let v = decision(&o);
    assert!(
        v["image"]["attestation"]
            .as_str()
            .is_some_and(|s| s.starts_with("sha256:")),
        "{v}"
    );
    assert_eq!(results(&v), results(&decision(&local)));
    assert_eq!(
        layer_gets(&reg),
        after_attest,
        "the attested read fetched layer blobs"
    );
    let o = check(
        &cfg,
        &[
            "--image",
            &by_tag_ref,
            "--plain-http",
            "--host",
            host.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert_eq!(decision(&o), decision(&l1));

    // The webhook's judge: the attested image, no layer read either.
    let mut c: gpu_guard::core::policy::Config = gpu_guard::config::load(Some(&cfg)).unwrap();
    c.admission.plain_http_registries = vec![reg.host.clone()];
    let j = gpu_guard_admission::webhook::RegistryJudge::new(c).unwrap();
    use gpu_guard_admission::judge::ImageJudge;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (d, res) = j
        .resolve(
            &format!("{}/team/cuda:12.4", reg.host),
            &ReadCtl::new(deadline),
        )
        .unwrap();
    assert_eq!(d.digest, digest);
    let p = j.place(&j.read(res, &ReadCtl::new(deadline)).unwrap(), &[]);
    assert_eq!(layer_gets(&reg), after_attest);
    match p {
        gpu_guard_admission::judge::Placement::Terms { terms, summary, .. } => {
            assert!(summary.contains("attested"), "{summary}");
            assert!(!terms.is_empty());
            let t = serde_json::to_value(&terms).unwrap();
            assert!(
                k8s_rules::validate(&t).is_empty(),
                "{:?}",
                k8s_rules::validate(&t)
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unreadable_images_are_one_line_exit_2() {
    let Some(reg) = Registry::start(true, true) else {
        return;
    };
    let dir = crate::support::TempDir::new("bad");
    let layout = dir.join("layout");
    let (digest, layers) = gpu_image(&layout);
    reg.push(&layout, "sec/cuda", "v1");
    let cfg = config(&dir);
    let host = data("hosts/h100x8.json");
    let ca = reg.tls.as_ref().unwrap().ca.clone();
    let img = format!("docker://{}/sec/cuda:v1", reg.host);
    let auth = dir.join("auth.json");
    let b64 = |s: &str| base64_encode(s.as_bytes());
    std::fs::write(
        &auth,
        format!(
            r#"{{"auths":{{"{}":{{"auth":"{}"}}}}}}"#,
            reg.host,
            b64(&format!(
                "{}:{}",
                registry_support::USER,
                registry_support::PASS
            ))
        ),
    )
    .unwrap();
    let ok = check(
        &cfg,
        &[
            "--image",
            &img,
            "--registry-ca",
            ca.to_str().unwrap(),
            "--host",
            host.to_str().unwrap(),
            "--json",
        ],
        &[("REGISTRY_AUTH_FILE", auth.to_str().unwrap())],
    );
    assert!(
        ok.status.code().is_some_and(|c| c < 2),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // Credentials from $DOCKER_CONFIG/config.json work the same.
    let dc = dir.join("dockercfg");
    std::fs::create_dir_all(&dc).unwrap();
    std::fs::copy(&auth, dc.join("config.json")).unwrap();
    let o = check(
        &cfg,
        &[
            "--image",
            &img,
            "--registry-ca",
            ca.to_str().unwrap(),
            "--host",
            host.to_str().unwrap(),
            "--json",
        ],
        &[("DOCKER_CONFIG", dc.to_str().unwrap())],
    );
    assert_eq!(
        o.status.code(),
        ok.status.code(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Wrong credentials.
    let wrong = dir.join("wrong.json");
    std::fs::write(
        &wrong,
        format!(
            r#"{{"auths":{{"{}":{{"auth":"{}"}}}}}}"#,
            reg.host,
            b64("gguser:nope")
        ),
    )
    .unwrap();
    let o = check(
        &cfg,
        &[
            "--image",
            &img,
            "--registry-ca",
            ca.to_str().unwrap(),
            "--host",
            host.to_str().unwrap(),
        ],
        &[("REGISTRY_AUTH_FILE", wrong.to_str().unwrap())],
    );
    one_line_exit_2(&o, &[&reg.host, "authentication failed", "wrong.json"]);
    // An unknown tag.
    let o = check(
        &cfg,
        &[
            "--image",
            &format!("docker://{}/sec/cuda:nope", reg.host),
            "--registry-ca",
            ca.to_str().unwrap(),
            "--host",
            host.to_str().unwrap(),
        ],
        &[("REGISTRY_AUTH_FILE", auth.to_str().unwrap())],
    );
    one_line_exit_2(&o, &[&reg.host, "not found"]);
    // An untrusted certificate (no --registry-ca).
    let o = check(
        &cfg,
        &["--image", &img, "--host", host.to_str().unwrap()],
        &[("REGISTRY_AUTH_FILE", auth.to_str().unwrap())],
    );
    one_line_exit_2(&o, &[&reg.host, "TLS"]);
    // A digest mismatch: the layer's bytes changed in the registry's storage
    // (the gzip header's MTIME, which decoders ignore: only the digest tells).
    let l = &layers[0];
    let mut bad = l.clone();
    bad[4] ^= 0x55;
    std::fs::write(reg.blob_data(&registry_support::sha256(l)), &bad).unwrap();
    let o = check(
        &cfg,
        &[
            "--image",
            &format!("docker://{}/sec/cuda@{digest}", reg.host),
            "--registry-ca",
            ca.to_str().unwrap(),
            "--host",
            host.to_str().unwrap(),
        ],
        &[("REGISTRY_AUTH_FILE", auth.to_str().unwrap())],
    );
    one_line_exit_2(&o, &[&reg.host, "digest mismatch"]);
}

fn base64_encode(b: &[u8]) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The webhook's terms, on every labelled node of `--nodes`, admit exactly
/// the nodes `check --nodes` allows (nodes without GFD driver labels cannot
/// be placed by labels and are left out), for the official CUDA images'
/// requirements (the label-only affinity, `fleet::affinity::label_terms`).
#[test]
fn webhook_terms_admit_exactly_what_check_nodes_allows() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    let dir = crate::support::TempDir::new("exact");
    let cfg = config(&dir);
    let nodes_file = data("nodes/fleet.json");
    let nodes: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&nodes_file).unwrap()).unwrap();
    let mut c: gpu_guard::core::policy::Config = gpu_guard::config::load(Some(&cfg)).unwrap();
    c.admission.plain_http_registries = vec![reg.host.clone()];
    let j = gpu_guard_admission::webhook::RegistryJudge::new(c).unwrap();
    use gpu_guard_admission::judge::ImageJudge;
    for (i, name) in [
        "cuda-11.8.0-base-ubuntu2204",
        "cuda-12.2.2-base-ubuntu2204",
        "cuda-12.4.1-base-ubuntu2204",
        "cuda-12.8.0-base-ubuntu2404",
    ]
    .iter()
    .enumerate()
    {
        let layout = dir.join(name);
        let env = env_of(name);
        let env: Vec<&str> = env.iter().map(String::as_str).collect();
        registry_support::oci_layout(
            &layout,
            &env,
            &[registry_support::layer(&[("etc/x", b"y")])],
        );
        reg.push(&layout, "official/cuda", &format!("t{i}"));
        let o = check(
            &cfg,
            &[
                "--image",
                layout.to_str().unwrap(),
                "--nodes",
                nodes_file.to_str().unwrap(),
                "--json",
            ],
            &[],
        );
        let v = decision(&o);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let (_, res) = j
            .resolve(
                &format!("{}/official/cuda:t{i}", reg.host),
                &ReadCtl::new(deadline),
            )
            .unwrap();
        let terms = match j.place(&j.read(res, &ReadCtl::new(deadline)).unwrap(), &[]) {
            gpu_guard_admission::judge::Placement::Terms { terms, .. } => {
                serde_json::to_value(terms).unwrap()
            }
            other => panic!("{name}: {other:?}"),
        };
        assert!(
            k8s_rules::validate(&terms).is_empty(),
            "{name}: {:?}",
            k8s_rules::validate(&terms)
        );
        for n in nodes["items"].as_array().unwrap() {
            let node = n["metadata"]["name"].as_str().unwrap();
            let labels: k8s_rules::Labels = n["metadata"]["labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect();
            if !labels.contains_key("nvidia.com/cuda.driver-version.major") {
                continue;
            }
            let allowed = v["results"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["host"] == node)
                .map(|r| r["decision"]["verdict"] == "allow")
                .unwrap();
            assert_eq!(
                k8s_rules::admits(&terms, node, &labels),
                allowed,
                "{name} on {node}: terms {terms}"
            );
        }
    }
    // A CUDA newer than gpu-guard's tables know: not a denial (an older
    // gpu-guard must not deny newer images cluster-wide), but terms a node
    // labelled with such a driver meets.
    let judge_env = |tag: &str, env: &[&str]| {
        let layout = dir.join(tag);
        registry_support::oci_layout(&layout, env, &[registry_support::layer(&[("etc/x", b"y")])]);
        reg.push(&layout, "official/cuda", tag);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let (_, res) = j
            .resolve(
                &format!("{}/official/cuda:{tag}", reg.host),
                &ReadCtl::new(deadline),
            )
            .unwrap();
        j.place(&j.read(res, &ReadCtl::new(deadline)).unwrap(), &[])
    };
    let future: k8s_rules::Labels = [
        ("gpu-guard.io/driver.int", "990001000"),
        ("gpu-guard.io/driver.branch", "990"),
        ("gpu-guard.io/cuda.int", "9900"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    match judge_env("future", &["NVIDIA_REQUIRE_CUDA=cuda>=99.0"]) {
        gpu_guard_admission::judge::Placement::Terms { terms, .. } => {
            let terms = serde_json::to_value(terms).unwrap();
            assert!(k8s_rules::admits(&terms, "future", &future), "{terms}");
            let mut today = future.clone();
            today.insert("gpu-guard.io/cuda.int".into(), "1305".into());
            assert!(!k8s_rules::admits(&terms, "today", &today), "{terms}");
        }
        other => panic!("cuda>=99.0: {other:?}"),
    }
    // A requirement no node can hold: denied with the diagnosis.
    match judge_env("impossible", &["NVIDIA_REQUIRE_CUDA=cuda>=12.0,cuda<11.0"]) {
        gpu_guard_admission::judge::Placement::Nowhere { diagnosis } => {
            assert!(diagnosis.contains("cuda<11.0"), "{diagnosis}")
        }
        other => panic!("cuda>=12.0,cuda<11.0: {other:?}"),
    }
}

/// The shipped config with `[libraries] severity` set.
fn libraries_severity(shipped: &str, severity: &str) -> String {
    let at = shipped.find("[libraries]\n").unwrap();
    let (head, tail) = shipped.split_at(at);
    let tail = tail.replacen(
        "\nseverity = \"warn\"\n",
        &format!("\nseverity = \"{severity}\"\n"),
        1,
    );
    assert!(tail.contains(&format!("severity = \"{severity}\"")));
    format!("{head}{tail}")
}

/// The libraries check through the registry: an image whose base declares CUDA 12.4
/// while its pip wheel ships CUDA 13's runtime is refused on a CUDA 12.4
/// host under `[libraries] severity = "enforce"`, read from its layers, from
/// its attestation (which carries the libraries scan), and placed by the
/// webhook only on CUDA 13 nodes. An attestation written with that scan off
/// is not used while it is on: the layers are read again.
#[test]
fn a_shipped_cuda_13_runtime_is_judged_from_the_registry_and_its_attestation() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    let dir = crate::support::TempDir::new("rt13");
    let layout = dir.join("layout");
    let sp = "usr/local/lib/python3.11/site-packages";
    let lib = format!("{sp}/nvidia/cu13/lib/libcudart.so.13");
    let meta = format!("{sp}/nvidia_cuda_runtime-13.0.96.dist-info/METADATA");
    let l1 = registry_support::layer(&[
        (lib.as_str(), b"\x7fELF not parsed".as_slice()),
        (
            meta.as_str(),
            b"Metadata-Version: 2.1\nName: nvidia-cuda-runtime\nVersion: 13.0.96\n",
        ),
    ]);
    let env = env_of("cuda-12.4.1-base-ubuntu2204");
    let env: Vec<&str> = env.iter().map(String::as_str).collect();
    let layers = vec![l1];
    registry_support::oci_layout(&layout, &env, &layers);
    reg.push(&layout, "team/wheels", "cu13");
    let enforce = dir.join("enforce.toml");
    let shipped = std::fs::read_to_string(config(&dir)).unwrap();
    std::fs::write(&enforce, libraries_severity(&shipped, "enforce")).unwrap();
    let off = dir.join("libs-off.toml");
    std::fs::write(&off, libraries_severity(&shipped, "off")).unwrap();
    let host = data("hosts/h100x8.json");
    let img = format!("docker://{}/team/wheels:cu13", reg.host);
    let run = |cfg: &Path, extra: &[&str]| {
        let mut a = vec!["--image", img.as_str(), "--plain-http"];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--host", host.to_str().unwrap(), "--json"]);
        check(cfg, &a, &[])
    };
    // The webhook places it on CUDA 13 nodes only.
    let placed_on_cuda_13_only = || {
        let mut c: gpu_guard::core::policy::Config =
            gpu_guard::config::load(Some(&enforce)).unwrap();
        c.admission.plain_http_registries = vec![reg.host.clone()];
        let j = gpu_guard_admission::webhook::RegistryJudge::new(c).unwrap();
        use gpu_guard_admission::judge::ImageJudge;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let (_, res) = j
            .resolve(
                &format!("{}/team/wheels:cu13", reg.host),
                &ReadCtl::new(deadline),
            )
            .unwrap();
        match j.place(&j.read(res, &ReadCtl::new(deadline)).unwrap(), &[]) {
            gpu_guard_admission::judge::Placement::Terms { terms, .. } => {
                let t = serde_json::to_value(&terms).unwrap();
                assert!(k8s_rules::validate(&t).is_empty(), "{t}");
                assert!(
                    k8s_rules::admits(&t, "n13", &k8s_rules::gfd_labels("580.65.06", "13.0")),
                    "{t}"
                );
                assert!(
                    !k8s_rules::admits(&t, "n124", &k8s_rules::gfd_labels("550.54.15", "12.4")),
                    "{t}"
                );
            }
            other => panic!("{other:?}"),
        }
    };
    let local = check(
        &enforce,
        &[
            "--image",
            layout.to_str().unwrap(),
            "--host",
            host.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    let lv = decision(&local);
    assert_eq!(local.status.code(), Some(1), "{lv}");
    assert_eq!(lv["libraries"]["cuda_runtimes"][0]["path"], lib, "{lv}");
    assert!(
        lv["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["check"] == "cuda-runtime" && f["severity"] == "error"),
        "{lv}"
    );
    // From the layers.
    let o = run(&enforce, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(results(&decision(&o)), results(&lv));
    // The webhook, from the layers (no attestation yet).
    placed_on_cuda_13_only();
    // An attestation written with the libraries scan off: not used here.
    let a = run(&off, &["--attest"]);
    assert_eq!(
        a.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&a.stderr)
    );
    let gets = || {
        reg.log_lines(&format!(
            "GET /v2/team/wheels/blobs/{}",
            registry_support::sha256(&layers[0])
        ))
    };
    let before = gets();
    let o = run(&enforce, &[]);
    assert_eq!(results(&decision(&o)), results(&lv));
    assert!(gets() > before, "the layers were read again");
    // With it: used, the same decision.
    let a = run(&enforce, &["--attest"]);
    assert_eq!(
        a.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&a.stderr)
    );
    let before = gets();
    let o = run(&enforce, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(results(&decision(&o)), results(&lv));
    assert_eq!(gets(), before, "the attested read fetched the layer");
    // Placed by the webhook from the attestation too.
    placed_on_cuda_13_only();
}
