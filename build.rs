//! `gpu-guard --version`: the version, the commit and the build date
//! (README, "Output and exit status").
//!
//! - The commit: `git rev-parse --short=12 HEAD` when the source is a git
//!   checkout and git is installed, else `unknown` (a source tarball).
//! - The date (UTC, `YYYY-MM-DD`): `SOURCE_DATE_EPOCH` when set
//!   (reproducible-builds.org/specs/source-date-epoch), else the commit's
//!   date, else `unknown`. Never the clock: two builds of one commit give
//!   the same binary.
//!
//! Nothing here runs at start-up: the values are compile-time strings.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Days since 1970-01-01 as a proleptic Gregorian date (H. Hinnant,
/// "chrono-Compatible Low-Level Date Algorithms", civil_from_days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn date(epoch: i64) -> String {
    let (y, m, d) = civil(epoch.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Reruns when HEAD moves: the HEAD file, the branch's ref, packed-refs.
/// Only the ones that exist are named: cargo reruns a build script at every
/// build while a path it watches is missing (a clone has packed-refs; a
/// repository whose refs were never packed has none), and a ref that moves
/// into packed-refs later removes its own file, which is a change.
fn watch_git() {
    let (Some(dir), Some(common)) = (
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ) else {
        return;
    };
    let (dir, common) = (PathBuf::from(dir), PathBuf::from(common));
    let mut watched = vec![dir.join("HEAD"), common.join("packed-refs")];
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(common.join(Path::new(&r)));
    }
    for p in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-changed=build.rs");
    watch_git();
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .or_else(|| git(&["log", "-1", "--format=%ct", "HEAD"]))
        .and_then(|s| s.trim().parse::<i64>().ok());
    let built = epoch.map_or_else(|| "unknown".into(), date);
    println!("cargo:rustc-env=GPU_GUARD_COMMIT={commit}");
    println!("cargo:rustc-env=GPU_GUARD_BUILD_DATE={built}");
    println!(
        "cargo:rustc-env=GPU_GUARD_VERSION_LINE={} (commit {commit}, built {built})",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default()
    );
}
