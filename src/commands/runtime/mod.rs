//! `gpu-guard runtime ARGS...` / `gpu-guard-runtime ARGS...`: an OCI runtime
//! wrapper for docker, containerd and CRI-O, in three steps, each in its
//! own file and each handing its result down to the next:
//!
//! 1. `parse.rs`: what the invocation is (create/run/restore with its
//!    bundle, exec with its process file and flags, delete, anything else);
//! 2. `decide.rs` (and `exec.rs` for exec): what to do, decided through
//!    the pipeline under one [`Policy`], handed on as an `outcome.rs`;
//! 3. `act.rs`: log, refuse or write, then exec the real runtime with the
//!    argv unchanged. Every subcommand but create, run, restore and exec is
//!    exec'd byte for byte.

mod act;
mod decide;
mod exec;
mod outcome;
mod parse;

use crate::pipeline::runtime::{self, find_real_runtime};
use crate::pipeline::Policy;
use std::ffi::OsString;
use std::path::Path;

pub fn main(config_flag: Option<&Path>, args: Vec<OsString>) -> i32 {
    crate::sys::metrics::mark_start();
    let policy = Policy::load(config_flag);
    let call = parse::call(&args, policy.engines());
    // The chain of the engine that invoked us (its root says which),
    // else the global one.
    let real = match find_real_runtime(policy.chained_runtime(call.engine)) {
        Ok(r) => r,
        Err(e) => {
            let key = match policy.config() {
                Ok(c) => runtime::chain_key(c, call.engine),
                Err(_) => "runtime.path".to_string(),
            };
            return act::no_runtime(&call, &runtime::problem(&e, &key, call.engine));
        }
    };
    let outcome = decide::outcome(&policy, &call, &real);
    act::carry_out(
        &policy.syslog(),
        policy.metrics(),
        &call,
        outcome,
        &real,
        &args,
    )
}
