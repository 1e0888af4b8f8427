//! The real webhook as operators see it: one log line per review, the
//! `/metrics` exposition, the serving certificate loaded again when its
//! files change, and a flood of connections that send all but the last
//! byte of their bodies.

use crate::hook_bin::{agent, pod, push_image, Hook};
use crate::registry_support::Registry;
use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn a_log_line_per_review_and_metrics() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    let digest = push_image(&reg, "ops/app", "1", &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"]);
    let keys = [("plain_http_registries", format!("[\"{}\"]", reg.host))];
    let Some(h) = Hook::start_with(&keys, true) else {
        return;
    };
    let img = format!("{}/ops/app:1", reg.host);
    let mut p = pod("ignored", &[("c", &img, serde_json::Value::Null)]);
    p["metadata"] = serde_json::json!({"generateName": "train-\u{202e}x-", "namespace": "ml team",
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": true}]});
    h.review(&p);
    h.review(&p);
    let cpu = serde_json::json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "x", "image": "nginx"}]}});
    h.review(&cpu);
    std::thread::sleep(Duration::from_millis(200));
    let log = h.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(" review uid=")).collect();
    assert_eq!(lines.len(), 3, "{log}");
    let l = lines[0];
    for want in [
        "namespace=default",
        "pod=train-\\u{202e}x-*",
        "owner=Job/train",
        "gpu_containers=1",
        &format!("images={}/ops/app@{digest}", reg.host),
        "decision=patched",
        " ms=",
    ] {
        assert!(l.contains(want), "{want:?} not in {l}");
    }
    assert!(!log.contains('\u{202e}'), "unescaped: {log}");
    assert!(lines[1].contains("cached=1"), "{}", lines[1]);
    assert!(lines[2].contains("decision=unchanged") && lines[2].contains("pod=web"));
    // The exposition, over TLS and over plain HTTP alike.
    let m = h.metrics();
    let plain = h.plain_metrics();
    assert!(
        plain.contains("# TYPE gpu_guard_admission_reviews_total counter"),
        "{plain}"
    );
    for want in [
        "gpu_guard_admission_reviews_total{result=\"patched\"} 2",
        "gpu_guard_admission_reviews_total{result=\"unchanged\"} 1",
        "gpu_guard_admission_cache_hits_total 1",
        "gpu_guard_admission_image_read_seconds_count 1",
        "gpu_guard_admission_review_seconds_count 3",
        "gpu_guard_admission_attestations_used_total 0",
        "gpu_guard_admission_budget_exhausted_total{budget=\"deadline\"} 0",
    ] {
        assert!(m.contains(want), "{want:?} not in\n{m}");
    }
}

/// The files are replaced in place (as the kubelet swaps a Secret volume):
/// new connections get the new certificate, without a restart.
#[test]
fn the_certificate_is_loaded_again_when_its_files_change() {
    let Some(h) = Hook::start(&[]) else {
        return;
    };
    assert!(h.healthy());
    let other = h.dir.join("next");
    std::fs::create_dir_all(&other).unwrap();
    let (ca2, cert2, key2) = crate::webhook::certs(&other);
    // A new agent each time: a kept-alive connection keeps its certificate.
    let healthz = |ca: &std::path::Path| {
        agent(ca)
            .get(format!("{}/healthz", h.url))
            .call()
            .is_ok_and(|r| r.status() == 200)
    };
    assert!(!healthz(&ca2));
    // A half-written pair (the new key with the old certificate) is not taken.
    let swap = |from: &std::path::Path, to: &std::path::Path| {
        let tmp = to.with_extension("tmp");
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, to).unwrap();
    };
    swap(&key2, &h.key);
    std::thread::sleep(Duration::from_secs(3));
    assert!(healthz(&h.ca), "the old pair stays in use");
    swap(&cert2, &h.cert);
    let t = Instant::now();
    while !healthz(&ca2) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "not reloaded: {}",
            h.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(!healthz(&h.ca), "the old certificate is no longer served");
    assert_eq!(h.metric("gpu_guard_admission_tls_reloads_total"), 1.0);
    assert!(h.metric("gpu_guard_admission_tls_reload_errors_total") >= 1.0);
}

/// A TLS client that sends a request's header and all but the last byte
/// of its 3 MiB body, then waits.
fn slow_body(
    addr: &str,
    ca: &std::path::Path,
) -> std::io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
    let tcp = TcpStream::connect(addr)?;
    tcp.set_write_timeout(Some(Duration::from_secs(30)))?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    let len = 3 << 20;
    write!(s, "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n")?;
    let chunk = vec![b' '; 64 << 10];
    let mut left = len - 1;
    while left > 0 {
        let n = left.min(chunk.len());
        s.write_all(&chunk[..n])?;
        left -= n;
    }
    s.flush()?;
    Ok(s)
}

/// 100 connections each holding a 3 MiB body one byte short: the webhook
/// stays within its memory, answers others, and lets them go in time.
#[test]
fn bodies_held_one_byte_short_are_bounded_in_memory_and_time() {
    let Some(h) = Hook::start(&[]) else {
        return;
    };
    let addr = h.url.trim_start_matches("https://").to_string();
    let before = h.mem_kib("VmRSS");
    let started = Instant::now();
    let clients: Vec<_> = (0..100)
        .map(|_| {
            let (addr, ca) = (addr.clone(), h.ca.clone());
            std::thread::spawn(move || {
                let s = slow_body(&addr, &ca);
                // Held until the server lets go: a read returns (408, 503 or EOF).
                let mut s = match s {
                    Ok(s) => s,
                    Err(_) => return Instant::now(),
                };
                let mut b = [0u8; 256];
                let _ = s.sock.set_read_timeout(Some(Duration::from_secs(60)));
                let _ = std::io::Read::read(&mut s, &mut b);
                Instant::now()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(4));
    assert!(h.healthy(), "another client is still served");
    let ends: Vec<Instant> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let last = ends.iter().max().unwrap().duration_since(started);
    assert!(last < Duration::from_secs(30), "held for {last:?}");
    let peak = h.mem_kib("VmHWM");
    assert!(
        peak < before + (96 << 10),
        "peak RSS {} MiB (from {} MiB)",
        peak >> 10,
        before >> 10
    );
    assert!(h.metric("gpu_guard_admission_budget_exhausted_total{budget=\"body\"}") >= 1.0);
}
