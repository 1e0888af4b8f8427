//! The serving certificate, loaded again when its files change.
//!
//! cert-manager renews the Secret before the certificate expires and the
//! kubelet updates the mounted files in place (an atomic swap of the
//! volume's `..data` symlink; kubernetes `pkg/volume/util/atomic_writer.go`).
//! A webhook that read them once would serve the old certificate until it
//! expired, and with `failurePolicy: Ignore` the API server would then
//! skip it without a word. So the files are looked at every few seconds;
//! when either changed (size, modification time or inode, after following
//! symlinks) the pair is loaded and, if it is a valid chain with its key,
//! served to new connections. A pair that does not load (the files seen
//! between two writes, a key that does not match) is logged and counted,
//! and the certificate in use is kept.

use crate::metrics::Metrics;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Pem { path: String, msg: String },
    #[error("the TLS certificate and key do not fit: {0}")]
    Tls(String),
}

/// What identifies a file's content without reading it.
type Stamp = Option<(u64, i64, i64, u64)>;

fn stamp(p: &Path) -> Stamp {
    let m = std::fs::metadata(p).ok()?;
    Some((m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
}

/// Loads a chain and its key from PEM files.
pub fn load(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, CertError> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| CertError::Read {
            path: p.display().to_string(),
            source,
        })
    };
    let pem = |p: &Path, msg: &str| CertError::Pem {
        path: p.display().to_string(),
        msg: msg.to_string(),
    };
    let cert_pem = read(cert)?;
    let chain: Vec<_> = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| pem(cert, &e.to_string()))?;
    if chain.is_empty() {
        return Err(pem(cert, "no PEM certificate in the file"));
    }
    let key_pem = read(key)?;
    let key_der = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|e| pem(key, &e.to_string()))?
        .ok_or_else(|| pem(key, "no PEM private key in the file"))?;
    CertifiedKey::from_der(chain, key_der, provider).map_err(|e| CertError::Tls(e.to_string()))
}

/// The certificate new connections get.
#[derive(Debug)]
pub struct Reloading {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    stamps: RwLock<(Stamp, Stamp)>,
    provider: Arc<CryptoProvider>,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}

impl Reloading {
    /// Loads the pair now (an error here stops the webhook from starting).
    pub fn new(cert: &Path, key: &Path) -> Result<Arc<Reloading>, CertError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let stamps = (stamp(cert), stamp(key));
        let ck = load(cert, key, &provider)?;
        Ok(Arc::new(Reloading {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current: RwLock::new(Arc::new(ck)),
            stamps: RwLock::new(stamps),
            provider,
        }))
    }

    /// The server config serving this certificate.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, CertError> {
        let cfg = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| CertError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        Ok(Arc::new(cfg))
    }

    /// Loads the pair again if a file changed; true when a new one is served.
    pub fn check(&self, metrics: &Metrics) -> bool {
        let now = (stamp(&self.cert), stamp(&self.key));
        // The files as last tried, loaded or not: a pair that failed is
        // tried again only once a file changes again.
        if *self.stamps.read().unwrap_or_else(|p| p.into_inner()) == now {
            return false;
        }
        *self.stamps.write().unwrap_or_else(|p| p.into_inner()) = now;
        match load(&self.cert, &self.key, &self.provider) {
            Ok(ck) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(ck);
                Metrics::inc(&metrics.tls_reloads);
                log::info!("TLS certificate loaded again from {}", self.cert.display());
                true
            }
            Err(e) => {
                Metrics::inc(&metrics.tls_reload_errors);
                log::warn!(
                    "TLS certificate files changed but do not load, still serving the previous one: {}",
                    gpu_guard::core::sanitize::one_line(&e.to_string())
                );
                false
            }
        }
    }

    /// Looks at the files every `every` until the task is dropped.
    pub async fn watch(self: Arc<Self>, every: Duration, metrics: Arc<Metrics>) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.check(&metrics);
        }
    }
}
