//! The webhook's [`ImageJudge`]: images read from registries with the
//! `[admission]` settings, placed by [`crate::placement`].

use crate::judge::{ImageJudge, Placement};
use crate::remote::{self, Access};
use gpu_guard::core::policy::Config;
use gpu_guard_registry::{Client, Platform, Reference, Resolved};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

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

    /// One client per registry, kept: tokens and connections are reused.
    fn client(&self, r: &Reference) -> Result<Arc<Client>, String> {
        let mut m = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = m.get(&r.registry) {
            return Ok(c.clone());
        }
        let c = Arc::new(
            self.access
                .client(
                    r,
                    Some(
                        Instant::now()
                            + std::time::Duration::from_millis(
                                self.config.admission.read_timeout_ms,
                            ),
                    ),
                )
                .map_err(|e| e.to_string())?,
        );
        m.insert(r.registry.clone(), c.clone());
        Ok(c)
    }
}

impl ImageJudge for RegistryJudge {
    type Resolved = (Arc<Client>, Reference, Resolved);

    fn resolve(&self, image: &str, _deadline: Instant) -> Result<(String, Self::Resolved), String> {
        let r = Reference::parse(image).map_err(|e| e.to_string())?;
        let c = self.client(&r)?;
        let res = c.resolve(&r, &self.platform).map_err(|e| e.to_string())?;
        Ok((res.manifest.digest.clone(), (c, r, res)))
    }

    fn judge(&self, (c, r, res): Self::Resolved, deadline: Instant) -> Result<Placement, String> {
        let limits = gpu_guard::image::Limits {
            max_time: deadline.saturating_duration_since(Instant::now()),
            ..Default::default()
        };
        let (needs, origin) = remote::read_needs(
            &c,
            &r,
            &res,
            &self.config,
            &self.config.admission.platform,
            limits,
            Some(deadline),
        )?;
        let mut p = crate::placement::place(&needs, &self.config);
        if let (Placement::Terms { summary, .. }, remote::Origin::Attestation(_)) =
            (&mut p, &origin)
        {
            summary.push_str(" (attested)");
        }
        Ok(p)
    }
}
