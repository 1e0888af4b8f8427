//! gpu-guard-admission's integration tests, one binary (one link of the
//! library and its HTTP/TLS stack): the webhook over TLS, registry images
//! against a real registry, docker-daemon images from a stand-in socket,
//! and the registry client (crates/registry, which this crate depends on)
//! against a real registry and a fake one.
//!
//! Helpers: `support` (tests/support: temp dirs, the skip rule) and
//! `registry_support` (a real registry, OCI layouts, hostile and fake
//! registries).

#[path = "../../../../tests/support/mod.rs"]
mod support;

mod registry_support;

mod daemon_check;
mod hook_bin;
mod hostile_check;
mod k8s_rules;
mod registry_check;
mod registry_client;
mod registry_messages;
mod webhook;
mod webhook_ops;
mod webhook_pods;
mod webhook_reads;
