//! The real webhook's image reads under hostile and slow registries: a
//! forged attestation in another repository, a pod naming thousands of
//! images on a registry that never answers, two reviews of a stalled
//! image, a big image behind a slow link (read on in the background),
//! and a registry that fails (remembered for a while).

use crate::hook_bin::{admits, bin, pod, push_image, Hook};
use crate::k8s_rules::gfd_labels;
use crate::registry_support::hostile::{Act, Hostile, Throttle};
use crate::registry_support::{self, Registry};
use std::time::{Duration, Instant};

const NEEDS: &str = "application/vnd.gpu-guard.needs.v1+json";

fn plain(hosts: &[&str]) -> (&'static str, String) {
    let list: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    ("plain_http_registries", format!("[{}]", list.join(", ")))
}

fn allowed_without_affinity(resp: &serde_json::Value, patched: &serde_json::Value) -> bool {
    resp["allowed"] == true && patched["spec"]["affinity"].is_null()
}

/// Byte-identical images in two repositories; the attacker's has a forged
/// attestation. Each is placed from its own repository.
#[test]
fn an_attestation_speaks_for_its_own_repository_only() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    let d1 = push_image(&reg, "victim/app", "1", &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"]);
    let dir = crate::support::TempDir::new("copy");
    let l = registry_support::layer(&[("etc/hello", b"victim/app:1")]);
    let d2 = registry_support::oci_layout(&dir, &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"], &[l]);
    reg.push(&dir, "attacker/app", "1");
    assert_eq!(d1, d2, "the same bytes");
    // A genuine attestation for the attacker's copy, then a forged one over it.
    let cfg = crate::hook_bin::config(&dir, &[]);
    let o = std::process::Command::new(bin())
        .arg("--config")
        .arg(&cfg)
        .args([
            "check",
            "--image",
            &format!("docker://{}/attacker/app:1", reg.host),
        ])
        .args(["--plain-http", "--attest"])
        .env("HOME", "/nonexistent")
        .output()
        .unwrap();
    assert!(
        o.status.code().is_some_and(|c| c < 2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let c = gpu_guard_registry::Client::new(
        &reg.host,
        &reg.host,
        gpu_guard_registry::Options {
            plain_http: true,
            ..Default::default()
        },
    )
    .unwrap();
    let any = |_: &[u8]| Ok(());
    let genuine = c
        .find_artifact("attacker/app", &d2, NEEDS, 4 << 20, &any)
        .artifact
        .unwrap();
    let mut forged: serde_json::Value = serde_json::from_slice(&genuine.layer).unwrap();
    forged["env"] = serde_json::json!(["NVIDIA_REQUIRE_CUDA=cuda>=12.8"]);
    let m = c.manifest("attacker/app", &d2).unwrap();
    c.attach(
        "attacker/app",
        (
            registry_support::hostile::OCI_MANIFEST,
            &d2,
            m.bytes.len() as u64,
        ),
        NEEDS,
        &serde_json::to_vec(&forged).unwrap(),
        "2099-01-01T00:00:00Z",
    )
    .unwrap();
    let Some(h) = Hook::start(&[plain(&[&reg.host])]) else {
        return;
    };
    let mid = gfd_labels("550.54.15", "12.4");
    let null = serde_json::Value::Null;
    let (_, p, _) = h.review(&pod(
        "a",
        &[("c", &format!("{}/attacker/app:1", reg.host), null.clone())],
    ));
    assert!(
        !admits(&p, &mid),
        "the forged attestation is used for its repository: {p}"
    );
    let (_, p, _) = h.review(&pod(
        "v",
        &[("c", &format!("{}/victim/app:1", reg.host), null)],
    ));
    assert!(
        admits(&p, &mid),
        "the victim's image is read for itself: {p}"
    );
}

/// One pod naming 3,000 images on a registry that never answers reads at
/// most `max_reads_per_review` of them, answers by its deadline, and a
/// healthy pod right after is placed in time.
#[test]
fn a_pod_of_thousands_of_stalled_images_starves_no_other_review() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    push_image(&reg, "ok/app", "1", &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"]);
    let stall = Hostile::start(None, Box::new(|_| Act::Stall));
    let Some(h) = Hook::start(&[
        plain(&[&reg.host, &stall.addr]),
        ("read_timeout_ms", "2000".into()),
    ]) else {
        return;
    };
    let names: Vec<(String, String)> = (0..3000)
        .map(|i| (format!("g{i}"), format!("{}/stall/i{i}:1", stall.addr)))
        .collect();
    let cs: Vec<(&str, &str, serde_json::Value)> = names
        .iter()
        .map(|(n, i)| (n.as_str(), i.as_str(), serde_json::Value::Null))
        .collect();
    let (resp, p, took) = h.review(&pod("many", &cs));
    assert!(allowed_without_affinity(&resp, &p), "{resp}");
    assert!(took < Duration::from_millis(3500), "{took:?}");
    std::thread::sleep(Duration::from_millis(500));
    let (resp, p, took) = h.review(&pod(
        "ok",
        &[(
            "c",
            &format!("{}/ok/app:1", reg.host),
            serde_json::Value::Null,
        )],
    ));
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert!(
        !p["spec"]["affinity"].is_null(),
        "the healthy pod is placed: {resp}"
    );
    assert!(
        stall.accepted.load(std::sync::atomic::Ordering::SeqCst) <= 2,
        "reads started: {}",
        stall.accepted.load(std::sync::atomic::Ordering::SeqCst)
    );
    assert!(h.metric("gpu_guard_admission_budget_exhausted_total{budget=\"review_reads\"}") >= 1.0);
}

/// Two reviews of one stalled image, the second a second later: each
/// answers by its own deadline (not after the first's read, then its own).
#[test]
fn each_review_of_a_stalled_image_answers_by_its_own_deadline() {
    let stall = Hostile::start(None, Box::new(|_| Act::Stall));
    let Some(h) = Hook::start(&[
        plain(&[&stall.addr]),
        ("read_timeout_ms", "2000".into()),
        ("on_unreadable", "\"deny\"".into()),
    ]) else {
        return;
    };
    let img = format!("{}/stall/app:1", stall.addr);
    let p = pod("p", &[("c", &img, serde_json::Value::Null)]);
    let h = std::sync::Arc::new(h);
    let first = {
        let (h, p) = (h.clone(), p.clone());
        std::thread::spawn(move || h.review(&p))
    };
    std::thread::sleep(Duration::from_millis(1000));
    let (resp, _, took) = h.review(&p);
    let (resp1, _, took1) = first.join().unwrap();
    for (r, t) in [(&resp1, took1), (&resp, took)] {
        assert_eq!(r["allowed"], false, "deny mode: {r}");
        assert!(t < Duration::from_millis(2800), "answered after {t:?}: {r}");
    }
}

/// A random (incompressible) payload.
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A real registry behind a slow link: the first review answers by its
/// deadline without affinity, the read goes on in the background, and the
/// next review of the image is placed from the cache at once.
#[test]
fn a_big_image_is_read_in_the_background_for_the_next_review() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    let dir = crate::support::TempDir::new("big");
    let big = noise(3 << 19);
    let l = registry_support::layer(&[("opt/model.bin", &big)]);
    registry_support::oci_layout(&dir, &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"], &[l]);
    reg.push(&dir, "big/app", "1");
    let slow = Throttle::start(&reg.host, 384 << 10);
    let Some(h) = Hook::start(&[plain(&[&slow.addr]), ("read_timeout_ms", "1500".into())]) else {
        return;
    };
    let p = pod(
        "p",
        &[(
            "c",
            &format!("{}/big/app:1", slow.addr),
            serde_json::Value::Null,
        )],
    );
    let (resp, patched, took) = h.review(&p);
    assert!(allowed_without_affinity(&resp, &patched), "{resp}");
    assert!(took < Duration::from_millis(2500), "{took:?}");
    let t = Instant::now();
    while h.metric("gpu_guard_admission_cached_images") < 1.0 {
        assert!(
            t.elapsed() < Duration::from_secs(40),
            "not cached: {}",
            h.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (resp, patched, took) = h.review(&p);
    assert!(!patched["spec"]["affinity"].is_null(), "{resp}");
    // From the cache: no read waited for (timing loosely: shared CI machines).
    assert!(took < Duration::from_millis(1500), "{took:?}");
    std::thread::sleep(Duration::from_millis(100));
    let log = h.log_text();
    let last = log
        .lines()
        .rfind(|l| l.contains(" review uid="))
        .unwrap_or("");
    assert!(
        last.contains("cached=1") && last.contains("decision=patched"),
        "{last}"
    );
    assert!(h.metric("gpu_guard_admission_background_reads_total") >= 1.0);
    assert!(h.metric("gpu_guard_admission_cache_hits_total") >= 1.0);
}

/// A registry that fails: the next review within `unreadable_cache_s`
/// answers at once without asking it again.
#[test]
fn an_unreadable_image_is_remembered_for_a_while() {
    let broken = Hostile::start(None, Box::new(|_| Act::status(500)));
    let Some(h) = Hook::start(&[plain(&[&broken.addr])]) else {
        return;
    };
    let p = pod(
        "p",
        &[(
            "c",
            &format!("{}/x/app:1", broken.addr),
            serde_json::Value::Null,
        )],
    );
    let (resp, patched, _) = h.review(&p);
    assert!(allowed_without_affinity(&resp, &patched), "{resp}");
    let asked = broken.seen().len();
    assert!(asked >= 1);
    let (resp, _, took) = h.review(&p);
    assert!(resp["warnings"].to_string().contains("HTTP 500"), "{resp}");
    assert!(took < Duration::from_millis(500), "{took:?}");
    assert_eq!(broken.seen().len(), asked, "asked again");
    assert_eq!(
        h.metric("gpu_guard_admission_unreadable_cache_hits_total"),
        1.0
    );
}

/// With no background slot free, a read is stopped when its review is
/// answered: its connection is closed at once, not left to time out.
#[test]
fn reads_without_a_background_slot_stop_with_their_review() {
    let s1 = Hostile::start(None, Box::new(|_| Act::Stall));
    let s2 = Hostile::start(None, Box::new(|_| Act::Stall));
    let Some(h) = Hook::start(&[
        plain(&[&s1.addr, &s2.addr]),
        ("read_timeout_ms", "1500".into()),
        ("background_reads", "1".into()),
    ]) else {
        return;
    };
    let null = serde_json::Value::Null;
    // The first takes the one background slot.
    h.review(&pod(
        "a",
        &[("c", &format!("{}/a/x:1", s1.addr), null.clone())],
    ));
    let (resp, _, _) = h.review(&pod("b", &[("c", &format!("{}/b/x:1", s2.addr), null)]));
    let answered = Instant::now();
    assert_eq!(resp["allowed"], true);
    let t = Instant::now();
    while s2.closed.lock().unwrap().is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the read was not stopped"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let closed = s2.closed.lock().unwrap()[0];
    assert!(closed.saturating_duration_since(answered) < Duration::from_millis(800));
    assert!(
        s1.closed.lock().unwrap().is_empty(),
        "the background read goes on"
    );
    assert!(h.metric("gpu_guard_admission_budget_exhausted_total{budget=\"background\"}") >= 1.0);
}
