//! The counts between decisions ([`State`]): kept in the state file as
//! lines, rendered as the exposition format node_exporter reads.
//!
//! Label values: `verdict`, `entry` and `mode` are the metrics' own words
//! ([`VERDICTS`], [`Entry`], [`MODES`]); `check` is whatever check a
//! finding names (core::decision `Check::as_str`), checked only for its
//! shape ([`check_label`]), so a check added to gpu-guard is counted
//! without a list here, and a state written by a newer gpu-guard keeps its
//! counts after a rollback. A line that is not one this version writes is
//! dropped alone: a damaged state costs only its bad lines.

use super::{Entry, Sample, BUCKETS};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// (verdict, check, entry, mode): one series of `gpu_guard_decisions_total`.
pub type Key = (String, String, String, String);

/// Which folding file a state counted: its device, inode, change time,
/// size and the first 8 bytes of the SHA-256 of what was read of it. An
/// inode number can be reused once the file is gone, and a change time has
/// the kernel clock's coarse resolution; a file with the same lines (each
/// with its own decision time) would be the same lines.
pub type Folded = (u64, u64, i64, i64, u64, u64);

/// The counts kept between decisions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    /// (verdict, check, entry, mode) → decisions.
    pub decisions: BTreeMap<Key, u64>,
    /// entry → histogram.
    pub seconds: BTreeMap<String, Histogram>,
    /// (driver, cuda), the last seen.
    pub host: Option<(String, String)>,
    /// The pending lines' folding file these counts include (pending.rs).
    pub folded: Option<Folded>,
    /// Lines of the file read that were dropped (damaged); not kept.
    pub bad_lines: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Observations per bucket of [`BUCKETS`] (not cumulative), then +Inf.
    pub counts: [u64; BUCKETS.len() + 1],
    pub sum: f64,
}

/// The `verdict` label (core::decision `Decision::outcome`): what
/// happened to the container; `would_refuse` when enforce would have
/// refused it and `mode = "audit"` or `"warn"` let it start, counted apart
/// from real refusals so one alert can watch both.
pub const VERDICTS: [&str; 4] = ["allow", "refuse", "skip", "would_refuse"];
/// The `mode` label: config.toml's words, and `unknown` for counts an
/// earlier gpu-guard kept without one.
pub const MODES: [&str; 5] = ["enforce", "warn", "audit", "off", "unknown"];
/// Series kept: a real node has a few dozen; more is a damaged state.
const MAX_SERIES: usize = 4096;

/// Whether `c` has the shape of a check name (`kernel-image`,
/// `cuda-runtime`, `none`): lowercase ASCII letters, digits and `-`,
/// beginning with a letter, at most 32 long. Nothing else can become a
/// label value, whatever a damaged line holds.
pub fn check_label(c: &str) -> bool {
    !c.is_empty()
        && c.len() <= 32
        && c.starts_with(|ch: char| ch.is_ascii_lowercase())
        && c.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A host version as a label value: the characters versions use, at most
/// 64 of them (NVML's strings are short; anything else is not a version).
fn version_label(s: &str) -> String {
    let v: String = s
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
        .take(64)
        .collect();
    if v.is_empty() {
        "unknown".into()
    } else {
        v
    }
}

impl State {
    /// Adds one decision.
    pub fn add(&mut self, s: &Sample) {
        let host = s.host.as_ref().map(|(d, c)| (d.as_str(), c.as_str()));
        let words = (s.verdict, s.check, s.entry, s.mode.name());
        self.add_raw(words, s.seconds, host);
    }

    /// [`State::add`] from a sample's words (a pending line's): verdict,
    /// check, entry, mode.
    fn add_raw(
        &mut self,
        (verdict, check, entry, mode): (&str, &str, Entry, &str),
        seconds: f64,
        host: Option<(&str, &str)>,
    ) {
        let key = (
            verdict.to_string(),
            check.to_string(),
            entry.as_str().to_string(),
            mode.to_string(),
        );
        if self.decisions.len() < MAX_SERIES || self.decisions.contains_key(&key) {
            *self.decisions.entry(key).or_default() += 1;
        }
        let h = self.seconds.entry(entry.as_str().into()).or_default();
        let secs = if seconds.is_finite() && seconds > 0.0 {
            seconds
        } else {
            0.0
        };
        let i = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        h.counts[i] += 1;
        h.sum += secs;
        if let Some((d, c)) = host {
            self.host = Some((version_label(d), version_label(c)));
        }
    }

    /// A sample as one line of the pending file, in [`State::add_line`]'s
    /// words: `s2 VERDICT CHECK ENTRY MODE SECONDS DRIVER CUDA` (`-` for
    /// no host).
    pub fn sample_line(s: &Sample) -> String {
        let (d, c) = match &s.host {
            Some((d, c)) => (version_label(d), version_label(c)),
            None => ("-".into(), "-".into()),
        };
        format!(
            "s2 {} {} {} {} {:?} {d} {c}\n",
            s.verdict,
            s.check,
            s.entry.as_str(),
            s.mode.name(),
            if s.seconds.is_finite() {
                s.seconds
            } else {
                0.0
            }
        )
    }

    /// Adds the sample of a pending line; false for a line that is not one
    /// [`State::sample_line`] writes (it is dropped). A line of the
    /// earlier format (`s`, no mode) counts with mode `unknown`.
    pub fn add_line(&mut self, line: &str) -> bool {
        let f: Vec<&str> = line.split(' ').collect();
        let (v, c, e, m, secs, d, cu) = match f.as_slice() {
            ["s2", v, c, e, m, secs, d, cu] => (*v, *c, *e, *m, *secs, *d, *cu),
            ["s", v, c, e, secs, d, cu] => (*v, *c, *e, "unknown", *secs, *d, *cu),
            _ => return false,
        };
        let (Some(e), Ok(secs)) = (Entry::parse(e), secs.parse::<f64>()) else {
            return false;
        };
        if !VERDICTS.contains(&v) || !check_label(c) || !MODES.contains(&m) {
            return false;
        }
        let host = (d != "-").then_some((d, cu));
        self.add_raw((v, c, e, m), secs, host);
        true
    }

    /// The state file's text: a header, then `d VERDICT CHECK ENTRY MODE
    /// N`, `h ENTRY SUM N...` and `host DRIVER CUDA` lines.
    pub fn to_text(&self) -> String {
        let mut out = String::from("gpu-guard-metrics 1\n");
        for ((v, c, e, m), n) in &self.decisions {
            let _ = writeln!(out, "d {v} {c} {e} {m} {n}");
        }
        for (e, h) in &self.seconds {
            let counts: Vec<String> = h.counts.iter().map(u64::to_string).collect();
            let _ = writeln!(out, "h {e} {:?} {}", h.sum, counts.join(" "));
        }
        if let Some((d, c)) = &self.host {
            let _ = writeln!(out, "host {d} {c}");
        }
        if let Some((dev, ino, cs, cns, len, digest)) = self.folded {
            let _ = writeln!(out, "folded {dev} {ino} {cs} {cns} {len} {digest}");
        }
        out
    }

    /// Reads a state file's bytes. A line that is not one this version
    /// writes (not UTF-8, or a label value of the wrong shape) is dropped,
    /// so a damaged file costs its bad lines, never a label it invents.
    /// A damaged header is one bad line too: every line is checked on its
    /// own. `d` lines of the earlier format (no mode) count as mode
    /// `unknown`.
    pub fn from_bytes(bytes: &[u8]) -> State {
        let mut s = State::default();
        let mut lines = bytes.split(|&b| b == b'\n').map(std::str::from_utf8);
        match lines.next() {
            Some(Ok("gpu-guard-metrics 1")) | None => {}
            Some(Ok("")) if bytes.len() <= 1 => {}
            Some(_) => s.bad_lines += 1,
        }
        for line in lines {
            let Ok(line) = line else {
                s.bad_lines += 1;
                continue;
            };
            if line.is_empty() {
                continue;
            }
            if !s.read_line(line) {
                s.bad_lines += 1;
            }
        }
        s
    }

    /// One line of a state file; false when it is not one this version
    /// writes.
    fn read_line(&mut self, line: &str) -> bool {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["d", v, c, e, m, n] => self.read_count((v, c, e, m), n),
            ["d", v, c, e, n] => self.read_count((v, c, e, "unknown"), n),
            ["h", e, sum, counts @ ..] if counts.len() == BUCKETS.len() + 1 => {
                let (Some(e), Ok(sum)) = (Entry::parse(e), sum.parse::<f64>()) else {
                    return false;
                };
                let parsed: Option<Vec<u64>> = counts.iter().map(|c| c.parse().ok()).collect();
                let Some(parsed) = parsed else {
                    return false;
                };
                let mut h = Histogram {
                    sum: if sum.is_finite() { sum } else { 0.0 },
                    ..Default::default()
                };
                h.counts.copy_from_slice(&parsed);
                self.seconds.insert(e.as_str().into(), h);
                true
            }
            ["host", d, c] => {
                self.host = Some((version_label(d), version_label(c)));
                true
            }
            ["folded", rest @ ..] => {
                self.folded = parse_folded(rest);
                self.folded.is_some()
            }
            _ => false,
        }
    }

    /// A `d` line's count: its words (verdict, check, entry, mode) checked.
    fn read_count(&mut self, (v, c, e, m): (&str, &str, &str, &str), n: &str) -> bool {
        let ok = VERDICTS.contains(&v) && check_label(c) && MODES.contains(&m);
        let (true, Some(e), Ok(n)) = (ok, Entry::parse(e), n.parse::<u64>()) else {
            return false;
        };
        let key = (v.to_string(), c.to_string(), e.as_str().into(), m.into());
        if self.decisions.len() < MAX_SERIES || self.decisions.contains_key(&key) {
            let total = self.decisions.entry(key).or_default();
            *total = total.saturating_add(n);
        }
        true
    }

    /// [`State::from_bytes`] of a text.
    pub fn from_text(text: &str) -> State {
        State::from_bytes(text.as_bytes())
    }

    /// The textfile: the exposition format node_exporter reads.
    pub fn render(&self, dropped: u64) -> String {
        let mut o = String::new();
        o.push_str("# HELP gpu_guard_decisions_total Container decisions of gpu-guard's hooks and runtime wrapper.\n");
        o.push_str("# TYPE gpu_guard_decisions_total counter\n");
        for ((v, c, e, m), n) in &self.decisions {
            let _ = writeln!(
                o,
                "gpu_guard_decisions_total{{verdict=\"{}\",check=\"{}\",entry=\"{}\",mode=\"{}\"}} {n}",
                escape(v),
                escape(c),
                escape(e),
                escape(m)
            );
        }
        o.push_str(
            "# HELP gpu_guard_decision_seconds Time from an entry point's start to its decision.\n",
        );
        o.push_str("# TYPE gpu_guard_decision_seconds histogram\n");
        for (e, h) in &self.seconds {
            let e = escape(e);
            let mut cumulative = 0;
            for (i, n) in h.counts.iter().enumerate() {
                cumulative += n;
                let le = BUCKETS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
                let _ = writeln!(
                    o,
                    "gpu_guard_decision_seconds_bucket{{entry=\"{e}\",le=\"{le}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                o,
                "gpu_guard_decision_seconds_sum{{entry=\"{e}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                o,
                "gpu_guard_decision_seconds_count{{entry=\"{e}\"}} {cumulative}"
            );
        }
        if let Some((d, c)) = &self.host {
            o.push_str("# HELP gpu_guard_host_info The NVIDIA driver and CUDA version the last decision with host facts saw.\n");
            o.push_str("# TYPE gpu_guard_host_info gauge\n");
            let _ = writeln!(
                o,
                "gpu_guard_host_info{{driver=\"{}\",cuda=\"{}\"}} 1",
                escape(d),
                escape(c)
            );
        }
        o.push_str("# HELP gpu_guard_metrics_dropped_total Decisions not counted: neither the state lock nor the pending file could be had.\n");
        o.push_str("# TYPE gpu_guard_metrics_dropped_total counter\n");
        let _ = writeln!(o, "gpu_guard_metrics_dropped_total {dropped}");
        o
    }
}

/// A `folded DEV INO CTIME CTIME_NSEC SIZE DIGEST` line's numbers.
fn parse_folded(f: &[&str]) -> Option<Folded> {
    let [dev, ino, cs, cns, len, digest] = f else {
        return None;
    };
    Some((
        dev.parse().ok()?,
        ino.parse().ok()?,
        cs.parse().ok()?,
        cns.parse().ok()?,
        len.parse().ok()?,
        digest.parse().ok()?,
    ))
}

/// A label value as the exposition format writes it: backslash, double
/// quote and line feed escaped (prometheus/docs exposition_formats.md).
pub fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::decision::{Check, Decision, Finding, Verdict};
    use crate::core::policy::Mode;

    fn verdict_label(v: Verdict, errors: bool, mode: Mode) -> &'static str {
        let mut d = Decision::skip();
        d.verdict = v;
        if errors {
            d.findings.push(Finding::error(Check::Host, "x"));
        }
        d.outcome(mode)
    }

    fn sample(v: Verdict, check: Option<Check>, entry: Entry, secs: f64) -> Sample {
        Sample {
            verdict: verdict_label(v, check.is_some(), Mode::Enforce),
            check: check.map_or("none", Check::as_str),
            entry,
            mode: Mode::Enforce,
            seconds: secs,
            host: Some(("535.104.05".into(), "12.2".into())),
        }
    }

    #[test]
    fn state_round_trips_and_renders() {
        let mut s = State::default();
        s.add(&sample(Verdict::Allow, None, Entry::Prestart, 0.002));
        s.add(&sample(Verdict::Allow, None, Entry::Prestart, 0.02));
        s.add(&sample(
            Verdict::Refuse,
            Some(Check::Requirement),
            Entry::Runtime,
            7.0,
        ));
        let again = State::from_text(&s.to_text());
        assert_eq!(again, s);
        let text = s.render(3);
        assert!(text.contains(
            "gpu_guard_decisions_total{verdict=\"allow\",check=\"none\",entry=\"prestart\",mode=\"enforce\"} 2\n"
        ));
        assert!(text.contains(
            "gpu_guard_decisions_total{verdict=\"refuse\",check=\"requirement\",entry=\"runtime\",mode=\"enforce\"} 1\n"
        ));
        assert!(
            text.contains("gpu_guard_decision_seconds_bucket{entry=\"prestart\",le=\"0.005\"} 1\n")
        );
        assert!(
            text.contains("gpu_guard_decision_seconds_bucket{entry=\"prestart\",le=\"0.05\"} 2\n")
        );
        assert!(text.contains("gpu_guard_decision_seconds_bucket{entry=\"runtime\",le=\"5\"} 0\n"));
        assert!(
            text.contains("gpu_guard_decision_seconds_bucket{entry=\"runtime\",le=\"+Inf\"} 1\n")
        );
        assert!(text.contains("gpu_guard_decision_seconds_count{entry=\"prestart\"} 2\n"));
        assert!(text.contains("gpu_guard_host_info{driver=\"535.104.05\",cuda=\"12.2\"} 1\n"));
        assert!(text.contains("gpu_guard_metrics_dropped_total 3\n"));
        assert!(!text.contains("container"), "no high-cardinality label");
    }

    #[test]
    fn pending_lines_round_trip() {
        let mut s = State::default();
        let line = State::sample_line(&sample(
            Verdict::Refuse,
            Some(Check::Host),
            Entry::Runtime,
            0.02,
        ));
        assert_eq!(
            line,
            "s2 refuse host runtime enforce 0.02 535.104.05 12.2\n"
        );
        assert!(s.add_line(line.trim_end()));
        let mut no_host = sample(Verdict::Skip, None, Entry::Prestart, 0.001);
        no_host.host = None;
        assert!(s.add_line(State::sample_line(&no_host).trim_end()));
        assert_eq!(s.decisions.len(), 2);
        assert_eq!(s.host, Some(("535.104.05".into(), "12.2".into())));
        // A line of the earlier format counts, its mode unknown.
        assert!(s.add_line("s refuse library runtime 0.5 - -"));
        assert!(s.decisions.contains_key(&(
            "refuse".into(),
            "library".into(),
            "runtime".into(),
            "unknown".into()
        )));
        for bad in [
            "",
            "s refuse host runtime",
            "s evil host runtime 1 - -",
            "s allow none nowhere 1 - -",
            "s allow none runtime x - -",
            "s2 allow none runtime sideways 1 - -",
            "s2 allow Bad\"label runtime enforce 1 - -",
            "s2 allow x{} runtime enforce 1 - -",
        ] {
            assert!(!s.add_line(bad), "{bad}");
        }
    }

    #[test]
    fn a_damaged_state_keeps_only_what_it_can_vouch_for() {
        let text = "gpu-guard-metrics 1\nd allow none runtime 5\nd allow none runtime x\nd allow \"evil runtime 1\nd allow none nosuch 1\nh runtime 1.5 1 2\nhost 535\"}\\n x\n";
        let s = State::from_text(text);
        assert_eq!(s.decisions.len(), 1);
        assert_eq!(s.bad_lines, 4);
        assert!(s.seconds.is_empty());
        assert_eq!(s.host, Some(("535n".into(), "x".into())));
        // A damaged header costs its line alone.
        let s = State::from_text("garbage\nd allow none runtime 5\n");
        assert_eq!((s.decisions.len(), s.bad_lines), (1, 1));
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn every_check_is_counted_and_bad_bytes_cost_their_line() {
        // Any check a finding has, with no list here: the ones of today and
        // the ones other parts of gpu-guard add.
        let mut s = State::default();
        for c in ["library", "cuda-runtime", "health", "vendor", "rocm"] {
            let mut x = sample(Verdict::Refuse, None, Entry::Runtime, 0.1);
            x.check = c;
            assert!(s.add_line(State::sample_line(&x).trim_end()), "{c}");
        }
        assert_eq!(s.decisions.len(), 5);
        // One non-UTF-8 byte: that line alone is dropped.
        let mut bytes = s.to_text().into_bytes();
        let at = bytes.windows(6).position(|w| w == b"health").unwrap();
        bytes[at] = 0xff;
        let back = State::from_bytes(&bytes);
        assert_eq!(back.decisions.len(), 4);
        assert_eq!(back.bad_lines, 1);
        // Audit and warn count apart from real refusals.
        assert_eq!(
            verdict_label(Verdict::Refuse, true, Mode::Audit),
            "would_refuse"
        );
        assert_eq!(
            verdict_label(Verdict::Allow, true, Mode::Warn),
            "would_refuse"
        );
        assert_eq!(verdict_label(Verdict::Allow, false, Mode::Warn), "allow");
        assert_eq!(
            verdict_label(Verdict::Refuse, true, Mode::Enforce),
            "refuse"
        );
    }
}
