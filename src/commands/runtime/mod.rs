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

/// `--help` or `-h` as the first argument, where runc would print its own
/// help: the wrapper's instead. Any later one is runc's (`--root X --help`
/// is passed through), and engines never ask for help.
pub fn asks_for_help(args: &[OsString]) -> bool {
    args.first().is_some_and(|a| a == "--help" || a == "-h")
}

pub fn main(config_flag: Option<&Path>, args: Vec<OsString>) -> i32 {
    crate::sys::metrics::mark_start();
    let policy = Policy::load(config_flag);
    let call = parse::call(&args, policy.engines());
    // The chain of the engine that invoked us (its root says which),
    // else the global one; under an invalid config, as far as it can be
    // read (pipeline::policy), never silently the first runc on PATH.
    let real = match find_real_runtime(policy.chained_runtime(call.engine)) {
        Ok(r) => r,
        Err(e) => {
            let key = runtime::chain_key(policy.effective(), call.engine);
            return act::no_runtime(&call, &runtime::problem(&e, &key, call.engine));
        }
    };
    let outcome = decide::outcome(&policy, &call, &real);
    act::carry_out(
        (&policy.syslog(), policy.mode()),
        policy.metrics(),
        &call,
        outcome,
        &real,
        &args,
    )
}
