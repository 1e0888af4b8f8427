//! The webhook's [`ImageJudge`]: images read from registries with the
//! `[admission]` settings, placed by [`crate::placement`].

use crate::judge::{ImageJudge, ImageKey, Placement, ReadCtl, ReadInfo};
use crate::remote::{self, Access, Origin, ReadOutcome};
use gpu_guard::core::policy::Config;
use gpu_guard_registry::{Client, Platform, Reference, Resolved};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Registries whose clients (tokens, TLS settings) are kept; past this the
/// map starts over, so pods naming thousands of hosts cannot grow it.
const MAX_CLIENTS: usize = 256;
/// Bytes of entry names one webhook read may keep: the largest CUDA images
/// keep tens of MB (about 100 bytes for each of a few hundred thousand
/// files), and several reads share the pod's memory.
const MAX_PATH_BYTES: u64 = 48 << 20;

pub struct RegistryJudge {
    pub config: Config,
    pub access: Access,
    pub platform: Platform,
    clients: Mutex<HashMap<String, Arc<Client>>>,
}

impl RegistryJudge {
    pub fn new(config: Config) -> Result<RegistryJudge, String> {
        let a = &config.admission;
        let platform = remote::parse_platform(&a.platform)?;
        let cred_files = if a.docker_config.is_empty() {
            gpu_guard_registry::credentials::default_files(&|k| std::env::var(k).ok())
        } else {
            vec![PathBuf::from(&a.docker_config)]
        };
        let access = Access {
            plain_http: a.plain_http_registries.clone(),
            all_plain_http: false,
            ca_files: if a.registry_ca.is_empty() {
                Vec::new()
            } else {
                vec![PathBuf::from(&a.registry_ca)]
            },
            cred_files,
        };
        // Fail at start, not on the first pod, for a CA file that cannot be read.
        if let Some(ca) = access.ca_files.first() {
            std::fs::read(ca)
                .map_err(|e| format!("[admission] registry_ca {}: {e}", ca.display()))?;
        }
        Ok(RegistryJudge {
            config,
            access,
            platform,
            clients: Mutex::new(HashMap::new()),
        })
    }

    /// One client per registry, kept: tokens are reused by every read.
    fn client(&self, r: &Reference) -> Result<Arc<Client>, String> {
        let mut m = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = m.get(&r.registry) {
            return Ok(c.clone());
        }
        if m.len() >= MAX_CLIENTS {
            m.clear();
        }
        let c = Arc::new(self.access.client(r, None).map_err(|e| e.to_string())?);
        m.insert(r.registry.clone(), c.clone());
        Ok(c)
    }
}

impl ImageJudge for RegistryJudge {
    type Resolved = (Arc<Client>, Reference, Resolved);
    type Read = ReadOutcome;

    fn resolve(&self, image: &str, ctl: &ReadCtl) -> Result<(ImageKey, Self::Resolved), String> {
        let r = Reference::parse(image).map_err(|e| e.to_string())?;
        // This read's own connections, bounded by its deadline and shut
        // down when it is stopped.
        let (c, cancel) = self.client(&r)?.for_read(Some(ctl.deadline));
        ctl.on_stop(move || cancel.cancel());
        let res = c.resolve(&r, &self.platform).map_err(|e| e.to_string())?;
        let key = ImageKey {
            registry: r.registry.clone(),
            repository: r.repository.clone(),
            digest: res.manifest.digest.clone(),
        };
        Ok((key, (Arc::new(c), r, res)))
    }

    fn read(&self, (c, r, res): Self::Resolved, ctl: &ReadCtl) -> Result<ReadOutcome, String> {
        let limits = gpu_guard::image::Limits {
            max_time: ctl.deadline.saturating_duration_since(Instant::now()),
            max_uncompressed_bytes: self.config.admission.max_image_bytes,
            max_path_bytes: MAX_PATH_BYTES,
            ..Default::default()
        };
        remote::read_needs(
            &c,
            &r,
            &res,
            &self.config,
            &self.config.admission.platform,
            limits,
            (Some(ctl.deadline), ctl.as_stop()),
        )
    }

    fn place(&self, read: &ReadOutcome, env: &[(String, String)]) -> Placement {
        let mut p = crate::placement::place(&read.needs, env, &self.config);
        if let (Placement::Terms { summary, .. }, Origin::Attestation(_)) = (&mut p, &read.origin) {
            summary.push_str(" (attested)");
        }
        p
    }

    fn info(&self, read: &ReadOutcome) -> ReadInfo {
        ReadInfo {
            attestation: match &read.origin {
                Origin::Attestation(a) => Some(a.clone()),
                Origin::Layers => None,
            },
            notes: read.notes.clone(),
        }
    }

    fn weight(&self, read: &ReadOutcome) -> u64 {
        read.needs.to_json().len() as u64 + 1024
    }
}
