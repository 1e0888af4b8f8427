//! gpu-guard-admission's integration tests, one binary (one link of the
//! library and its HTTP/TLS stack): the webhook over TLS, registry images
//! against a real registry, docker-daemon images from a stand-in socket.

#[path = "../../../registry/tests/support/mod.rs"]
mod support;

mod daemon_check;
mod k8s_rules;
mod registry_check;
mod webhook;
