//! Why the pod is stopping: a DaemonSet deletion (uninstall) or anything
//! else (keep gpu-guard registered).
//!
//! The kubelet sends the same SIGTERM for a DaemonSet deletion, a rolling
//! upgrade, an eviction and a node shutdown, and nothing in the pod tells
//! them apart. The DaemonSet object does:
//! - deleted with background propagation (kubectl's default), it is gone
//!   before the garbage collector deletes its pods: GET answers 404;
//! - deleted with foreground propagation, it stays, with
//!   `metadata.deletionTimestamp` set, until its pods are gone;
//! - deleted and created anew, it has another `metadata.uid` than the one
//!   this pod's DaemonSet had at start: the new one's pods register again,
//!   so this pod keeps everything in place for them;
//! - in a rolling upgrade, an eviction, a drain or a node shutdown, it is
//!   there, with the uid this pod started under and no deletionTimestamp.
//!
//! Only the first two uninstall. An API server that cannot be asked keeps
//! gpu-guard registered (a node that stays protected, with a warning and
//! the manual command, rather than one that silently stops being).
//!
//! NVIDIA's toolkit container cleans up on every termination signal
//! (nvidia-container-toolkit cmd/nvidia-ctk-installer/main.go, `Run`:
//! `runtimeConfigurer.Cleanup` after the signal), so each of its upgrades
//! leaves the node unprotected until the new pod has installed again.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where the API server and this pod's DaemonSet are.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// `https://HOST:PORT`; from KUBERNETES_SERVICE_HOST/PORT in a pod.
    pub server: String,
    pub token_file: PathBuf,
    pub ca_file: PathBuf,
    pub namespace: String,
    pub daemonset: String,
    pub timeout: Duration,
}

/// What the API server says about the DaemonSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaemonSetState {
    /// There, not being deleted, with this uid.
    Present {
        uid: String,
    },
    /// Being deleted (deletionTimestamp set), with this uid.
    Deleting {
        uid: String,
    },
    Gone,
}

/// The decision at SIGTERM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopping {
    /// The DaemonSet is deleted: uninstall.
    Deleted(String),
    /// Anything else: keep gpu-guard registered.
    Keep(String),
}

/// Decides from the uid seen at start and the state now.
pub fn stopping_for(start_uid: Option<&str>, now: Result<DaemonSetState, String>) -> Stopping {
    match now {
        Ok(DaemonSetState::Gone) => Stopping::Deleted("the DaemonSet no longer exists".into()),
        Ok(DaemonSetState::Deleting { uid }) if start_uid.is_none_or(|s| s == uid) => {
            Stopping::Deleted("the DaemonSet is being deleted".into())
        }
        Ok(DaemonSetState::Deleting { .. }) | Ok(DaemonSetState::Present { .. })
            if start_uid.is_none() =>
        {
            Stopping::Keep("the DaemonSet exists (its uid at start is unknown)".into())
        }
        Ok(DaemonSetState::Present { uid }) | Ok(DaemonSetState::Deleting { uid })
            if Some(uid.as_str()) != start_uid =>
        {
            Stopping::Keep(format!(
                "a new DaemonSet of the same name (uid {uid}) will register gpu-guard again"
            ))
        }
        Ok(DaemonSetState::Present { .. }) | Ok(DaemonSetState::Deleting { .. }) => {
            Stopping::Keep(
                "the DaemonSet is still there (a rolling upgrade, an eviction or a node shutdown)"
                    .into(),
            )
        }
        Err(e) => Stopping::Keep(format!(
            "cannot ask the API server whether the DaemonSet was deleted ({e}); if it was, run `gpu-guard uninstall ENGINE` on this node"
        )),
    }
}

/// GETs the DaemonSet.
pub fn daemonset(api: &ApiSettings) -> Result<DaemonSetState, String> {
    let token = std::fs::read_to_string(&api.token_file)
        .map_err(|e| format!("cannot read {}: {e}", api.token_file.display()))?;
    let pem = std::fs::read(&api.ca_file)
        .map_err(|e| format!("cannot read {}: {e}", api.ca_file.display()))?;
    let roots: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
        .filter_map(|i| match i {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if roots.is_empty() {
        return Err(format!("no certificate in {}", api.ca_file.display()));
    }
    let tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
        .build();
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(tls)
        .timeout_global(Some(api.timeout))
        .build()
        .new_agent();
    let url = format!(
        "{}/apis/apps/v1/namespaces/{}/daemonsets/{}",
        api.server.trim_end_matches('/'),
        api.namespace,
        api.daemonset
    );
    let mut resp = agent
        .get(&url)
        .header("Authorization", &format!("Bearer {}", token.trim()))
        .header("Accept", "application/json")
        .call()
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    if status == 404 {
        return Ok(DaemonSetState::Gone);
    }
    let body = resp
        .body_mut()
        .with_config()
        .limit(4 * 1024 * 1024)
        .read_to_string()
        .map_err(|e| e.to_string())?;
    if status != 200 {
        let msg: String = body.chars().take(200).collect();
        return Err(format!("HTTP {status}: {msg}"));
    }
    parse(&body)
}

/// The state from a DaemonSet's JSON.
pub fn parse(body: &str) -> Result<DaemonSetState, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("not a DaemonSet: {e}"))?;
    let meta = &v["metadata"];
    let uid = meta["uid"]
        .as_str()
        .ok_or("the DaemonSet has no metadata.uid")?
        .to_string();
    Ok(match meta.get("deletionTimestamp") {
        Some(t) if !t.is_null() => DaemonSetState::Deleting { uid },
        _ => DaemonSetState::Present { uid },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_deletion_uninstalls() {
        let present = |u: &str| Ok(DaemonSetState::Present { uid: u.into() });
        let deleting = |u: &str| Ok(DaemonSetState::Deleting { uid: u.into() });
        assert!(matches!(
            stopping_for(Some("a"), Ok(DaemonSetState::Gone)),
            Stopping::Deleted(_)
        ));
        assert!(matches!(
            stopping_for(Some("a"), deleting("a")),
            Stopping::Deleted(_)
        ));
        assert!(matches!(
            stopping_for(None, Ok(DaemonSetState::Gone)),
            Stopping::Deleted(_)
        ));
        assert!(matches!(
            stopping_for(Some("a"), present("a")),
            Stopping::Keep(_)
        ));
        assert!(matches!(
            stopping_for(Some("a"), present("b")),
            Stopping::Keep(_)
        ));
        assert!(matches!(
            stopping_for(Some("a"), deleting("b")),
            Stopping::Keep(_)
        ));
        assert!(matches!(
            stopping_for(None, present("a")),
            Stopping::Keep(_)
        ));
        assert!(matches!(
            stopping_for(Some("a"), Err("timeout".into())),
            Stopping::Keep(_)
        ));
    }

    #[test]
    fn parse_reads_uid_and_deletion() {
        assert_eq!(
            parse(r#"{"metadata":{"uid":"u1"}}"#).unwrap(),
            DaemonSetState::Present { uid: "u1".into() }
        );
        assert_eq!(
            parse(r#"{"metadata":{"uid":"u1","deletionTimestamp":"2025-01-01T00:00:00Z"}}"#)
                .unwrap(),
            DaemonSetState::Deleting { uid: "u1".into() }
        );
        assert!(parse("{}").is_err());
    }
}
