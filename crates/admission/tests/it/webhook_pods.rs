//! The real webhook over TLS against a real registry: pods with several
//! GPU containers whose needs leave no node, containers whose own env
//! changes what the node decides, the RuntimeClass set on GPU pods, the
//! needs annotation cut between tokens, and pods asking for AMD GPUs.

use crate::hook_bin::{admits, pod, push_image, Hook};
use crate::k8s_rules::gfd_labels;
use crate::registry_support::Registry;
use serde_json::json;

fn plain(reg: &Registry) -> (&'static str, String) {
    ("plain_http_registries", format!("[\"{}\"]", reg.host))
}

/// Three GPU containers: A needs a GeForce, B a Tesla, C a CUDA 12.4
/// driver: A and B leave no node, so the pod is denied, whatever comes
/// after them; B and C admit the Tesla nodes with new drivers only.
#[test]
fn no_node_left_is_a_denial_for_any_number_of_containers() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    push_image(&reg, "c1/a", "1", &["NVIDIA_REQUIRE_BRAND=brand=geforce"]);
    push_image(&reg, "c1/b", "1", &["NVIDIA_REQUIRE_BRAND=brand=tesla"]);
    push_image(&reg, "c1/c", "1", &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"]);
    let Some(h) = Hook::start(&[plain(&reg)]) else {
        return;
    };
    let img = |n: &str| format!("{}/c1/{n}:1", reg.host);
    let (a, b, c) = (img("a"), img("b"), img("c"));
    let null = serde_json::Value::Null;
    for order in [
        vec![&a, &b],
        vec![&a, &b, &c],
        vec![&c, &a, &b],
        vec![&a, &b, &c, &c],
    ] {
        let cs: Vec<(String, &str, serde_json::Value)> = order
            .iter()
            .enumerate()
            .map(|(i, im)| (format!("g{i}"), im.as_str(), null.clone()))
            .collect();
        let cs: Vec<(&str, &str, serde_json::Value)> = cs
            .iter()
            .map(|(n, i, e)| (n.as_str(), *i, e.clone()))
            .collect();
        let (resp, _, _) = h.review(&pod("p", &cs));
        assert_eq!(resp["allowed"], false, "{order:?}: {resp}");
        let msg = resp["status"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("no node"), "{msg}");
    }
    let (resp, patched, _) = h.review(&pod("p", &[("b", &b, null.clone()), ("c", &c, null)]));
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(admits(&patched, &gfd_labels("550.54.15", "12.4")));
    assert!(!admits(&patched, &gfd_labels("470.82.01", "11.4")));
}

/// The container's own env over the image's, as the runtime merges them:
/// a requirement it sets, or NVIDIA_DISABLE_REQUIRE, changes the terms;
/// each is cached apart; what the webhook cannot read is said.
#[test]
fn containers_are_judged_with_their_own_env_over_the_image() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    push_image(&reg, "c2/app", "1", &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"]);
    let Some(h) = Hook::start(&[plain(&reg)]) else {
        return;
    };
    let img = format!("{}/c2/app:1", reg.host);
    let (new, mid, old) = (
        gfd_labels("570.86.15", "12.8"),
        gfd_labels("550.54.15", "12.4"),
        gfd_labels("470.82.01", "11.4"),
    );
    // The image's own requirement first (it is cached).
    let (_, p, _) = h.review(&pod("plain", &[("c", &img, serde_json::Value::Null)]));
    assert!(
        admits(&p, &new) && admits(&p, &mid) && !admits(&p, &old),
        "{p}"
    );
    // A stricter requirement in the pod: 12.4 nodes are out.
    let env = json!([{"name": "V", "value": "12.8"},
        {"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=$(V)"}]);
    let (resp, p, _) = h.review(&pod("stricter", &[("c", &img, env)]));
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(admits(&p, &new) && !admits(&p, &mid), "{p}");
    let ann = p["metadata"]["annotations"]["gpu-guard.io/needs"]
        .as_str()
        .unwrap();
    assert!(ann.contains("cuda>=12.8"), "{ann}");
    // The pod turns the requirement off: the old driver is fine for it.
    let env = json!([{"name": "NVIDIA_DISABLE_REQUIRE", "value": "true"}]);
    let (_, p, _) = h.review(&pod("off", &[("c", &img, env)]));
    assert!(admits(&p, &old) && admits(&p, &mid), "{p}");
    // And the image's own again: its cache entry was not replaced.
    let (_, p, _) = h.review(&pod("plain2", &[("c", &img, serde_json::Value::Null)]));
    assert!(admits(&p, &mid) && !admits(&p, &old), "{p}");
    // Values it cannot read: judged without them, and said.
    let mut q = pod(
        "secret",
        &[(
            "c",
            &img,
            json!([
        {"name": "NVIDIA_DISABLE_REQUIRE", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
        )],
    );
    q["spec"]["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "gpu-env"}}]);
    let (resp, p, _) = h.review(&q);
    let w = resp["warnings"].to_string();
    assert!(
        w.contains("NVIDIA_DISABLE_REQUIRE") && w.contains("ConfigMap gpu-env"),
        "{w}"
    );
    assert!(!admits(&p, &old), "{p}");
}

/// `[admission] runtime_class`: set on GPU pods naming none (also when the
/// image cannot be read), never on others; the needs annotation is cut
/// between tokens.
#[test]
fn runtime_class_for_gpu_pods_and_the_annotation_cut_between_tokens() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    push_image(&reg, "b3/app", "1", &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"]);
    let Some(h) = Hook::start(&[plain(&reg), ("runtime_class", "\"gpu-guard\"".into())]) else {
        return;
    };
    let img = format!("{}/b3/app:1", reg.host);
    let null = serde_json::Value::Null;
    let (_, p, _) = h.review(&pod("p", &[("c", &img, null.clone())]));
    assert_eq!(p["spec"]["runtimeClassName"], "gpu-guard", "{p}");
    let mut own = pod("own", &[("c", &img, null.clone())]);
    own["spec"]["runtimeClassName"] = "kata".into();
    let (_, p, _) = h.review(&own);
    assert_eq!(p["spec"]["runtimeClassName"], "kata");
    let cpu =
        json!({"metadata": {"name": "cpu"}, "spec": {"containers": [{"name": "x", "image": img}]}});
    let (resp, _, _) = h.review(&cpu);
    assert!(resp["patch"].is_null(), "{resp}");
    // An image that cannot be read: admitted without affinity, with the class.
    let gone = format!("{}/b3/missing:1", reg.host);
    let (resp, p, _) = h.review(&pod("gone", &[("c", &gone, null.clone())]));
    assert_eq!(resp["allowed"], true);
    assert_eq!(p["spec"]["runtimeClassName"], "gpu-guard", "{resp}");
    assert!(p["spec"]["affinity"].is_null());
    // Many containers: the one-line summary is longer than the annotation's 2048.
    let names: Vec<String> = (0..60)
        .map(|i| format!("worker-container-number-{i:03}"))
        .collect();
    let (_, p, _) = h.review(&pod(
        "one",
        &[(names[0].as_str(), img.as_str(), null.clone())],
    ));
    let one = p["metadata"]["annotations"]["gpu-guard.io/needs"]
        .as_str()
        .unwrap();
    let rest = one
        .strip_prefix(&format!("{}: ", names[0]))
        .unwrap()
        .to_string();
    let full = names
        .iter()
        .map(|n| format!("{n}: {rest}"))
        .collect::<Vec<_>>()
        .join("; ");
    assert!(full.len() > 2048);
    let cs: Vec<(&str, &str, serde_json::Value)> = names
        .iter()
        .map(|n| (n.as_str(), img.as_str(), null.clone()))
        .collect();
    let (_, p, _) = h.review(&pod("many", &cs));
    let ann = p["metadata"]["annotations"]["gpu-guard.io/needs"]
        .as_str()
        .unwrap();
    assert!(ann.chars().count() <= 2048, "{}", ann.len());
    let body = ann.strip_suffix(" …").unwrap_or_else(|| {
        panic!(
            "not marked as cut: ...{}",
            &ann[ann.len().saturating_sub(80)..]
        )
    });
    // Whole tokens only: the text kept ends where a token of the full text ends.
    assert!(full.starts_with(body), "{body}");
    let next = full[body.len()..].chars().next();
    assert!(
        matches!(next, Some(' ' | ';' | ',')),
        "cut inside a token: ...{} | {}",
        &body[body.len().saturating_sub(40)..],
        &full[body.len()..body.len() + 20]
    );
}

fn amd_labels(gfx: &str) -> crate::k8s_rules::Labels {
    [
        ("kubernetes.io/os", "linux"),
        ("gpu-guard.io/vendor", "amd"),
        ("gpu-guard.io/amd.gfx", gfx),
        ("amd.com/gpu.family", "AI"),
        ("amd.com/gpu.driver-version", "6.12.12"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// A pod asking for AMD's resource (`amd.com/gpu`) is placed by its image's
/// AMD code objects (tests/data/hip/hipcc-multi.so: gfx1030, gfx906,
/// gfx90a:xnack+) on AMD nodes only; a CUDA image in an NVIDIA pod is kept
/// off AMD nodes; a CUDA image asking for AMD GPUs has no node.
#[test]
fn amd_pods_are_placed_by_their_code_objects() {
    use crate::registry_support::{layer, oci_layout};
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    let lib =
        std::fs::read(crate::hook_bin::repo_root().join("tests/data/hip/hipcc-multi.so")).unwrap();
    let dir = crate::support::TempDir::new("rocm-img");
    let l = layer(&[
        ("opt/rocm/lib/librocsparse.so.1", &lib[..]),
        ("opt/rocm/.info/version", &b"6.4.0-47"[..]),
    ]);
    oci_layout(&dir, &["PATH=/opt/rocm/bin:/usr/bin"], &[l]);
    reg.push(&dir, "amd/rocm", "1");
    push_image(
        &reg,
        "amd/cuda",
        "1",
        &["NVIDIA_REQUIRE_CUDA=cuda>=12.0", "CUDA_VERSION=12.4.1"],
    );
    let Some(h) = Hook::start(&[plain(&reg)]) else {
        return;
    };
    let (rocm, cuda) = (
        format!("{}/amd/rocm:1", reg.host),
        format!("{}/amd/cuda:1", reg.host),
    );
    let amd_pod = |name: &str, image: &str| {
        let mut p = pod(name, &[("c", image, serde_json::Value::Null)]);
        p["spec"]["containers"][0]["resources"] = json!({"limits": {"amd.com/gpu": "1"}});
        p
    };
    let (resp, p, _) = h.review(&amd_pod("rocm", &rocm));
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(admits(&p, &amd_labels("gfx1030")), "{p}");
    assert!(admits(&p, &amd_labels("gfx906")), "{p}");
    assert!(!admits(&p, &amd_labels("gfx942")), "{p}");
    assert!(!admits(&p, &gfd_labels("550.54.15", "12.4")), "{p}");
    // The CUDA image in an NVIDIA pod: NVIDIA nodes, no AMD node.
    let (resp, p, _) = h.review(&pod("cuda", &[("c", &cuda, serde_json::Value::Null)]));
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(admits(&p, &gfd_labels("550.54.15", "12.4")), "{p}");
    assert!(!admits(&p, &amd_labels("gfx1030")), "{p}");
    // The CUDA image asking for AMD GPUs: no node could run it.
    let (resp, _, _) = h.review(&amd_pod("cuda-on-amd", &cuda));
    assert_eq!(resp["allowed"], false, "{resp}");
    let msg = resp["status"]["message"].as_str().unwrap_or("");
    assert!(
        msg.contains("cannot run on any GPU node") && msg.contains("built for CUDA"),
        "{msg}"
    );
}

/// Each pod by its own GPU count: the image is placed once, and a pod that
/// asks for 4 GPUs is kept off a node labelled with 2 healthy ones, which
/// the same image's 1-GPU pod may use.
#[test]
fn pods_are_kept_off_nodes_with_fewer_healthy_gpus_than_they_ask_for() {
    let Some(reg) = Registry::start(false, false) else {
        return;
    };
    push_image(&reg, "c5/app", "1", &["NVIDIA_REQUIRE_CUDA=cuda>=12.4"]);
    let Some(h) = Hook::start(&[plain(&reg)]) else {
        return;
    };
    let img = format!("{}/c5/app:1", reg.host);
    let with_healthy = |n: &str| {
        let mut l = gfd_labels("550.54.15", "12.4");
        l.insert("gpu-guard.io/gpu.healthy".into(), n.into());
        l
    };
    let asking = |gpus: &str| {
        let mut p = pod("p", &[("g", &img, serde_json::Value::Null)]);
        p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!(gpus);
        p
    };
    let (resp, four, _) = h.review(&asking("4"));
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(admits(&four, &with_healthy("8")), "{four}");
    assert!(admits(&four, &with_healthy("4")), "{four}");
    assert!(!admits(&four, &with_healthy("2")), "{four}");
    let (_, one, _) = h.review(&asking("1"));
    assert!(admits(&one, &with_healthy("2")), "{one}");
    assert!(!admits(&one, &with_healthy("0")), "{one}");
}
