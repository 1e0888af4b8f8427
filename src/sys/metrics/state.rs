//! The counts between decisions ([`State`]): kept in the state file as
//! lines, rendered as the exposition format node_exporter reads.

use super::{Entry, Sample, BUCKETS};
use crate::core::decision::{Check, Verdict};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The counts kept between decisions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    /// (verdict, check, entry) → decisions.
    pub decisions: BTreeMap<(String, String, String), u64>,
    /// entry → histogram.
    pub seconds: BTreeMap<String, Histogram>,
    /// (driver, cuda), the last seen.
    pub host: Option<(String, String)>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Observations per bucket of [`BUCKETS`] (not cumulative), then +Inf.
    pub counts: [u64; BUCKETS.len() + 1],
    pub sum: f64,
}

fn verdict_str(v: Verdict) -> &'static str {
    match v {
        Verdict::Allow => "allow",
        Verdict::Refuse => "refuse",
        Verdict::Skip => "skip",
    }
}

const VERDICTS: [&str; 3] = ["allow", "refuse", "skip"];
const CHECKS: [&str; 9] = [
    "none",
    "requirement",
    "device",
    "host",
    "kernel-image",
    "tuning",
    "security",
    "config",
    "compat",
];

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
        let check = s.check.map_or("none", Check::as_str);
        let host = s.host.as_ref().map(|(d, c)| (d.as_str(), c.as_str()));
        self.add_raw(verdict_str(s.verdict), check, s.entry, s.seconds, host);
    }

    /// [`State::add`] from a sample's words (a pending line's).
    fn add_raw(
        &mut self,
        verdict: &str,
        check: &str,
        entry: Entry,
        seconds: f64,
        host: Option<(&str, &str)>,
    ) {
        let key = (
            verdict.to_string(),
            check.to_string(),
            entry.as_str().to_string(),
        );
        *self.decisions.entry(key).or_default() += 1;
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
    /// words: `s VERDICT CHECK ENTRY SECONDS DRIVER CUDA` (`-` for no host).
    pub fn sample_line(s: &Sample) -> String {
        let (d, c) = match &s.host {
            Some((d, c)) => (version_label(d), version_label(c)),
            None => ("-".into(), "-".into()),
        };
        format!(
            "s {} {} {} {:?} {d} {c}\n",
            verdict_str(s.verdict),
            s.check.map_or("none", Check::as_str),
            s.entry.as_str(),
            if s.seconds.is_finite() {
                s.seconds
            } else {
                0.0
            }
        )
    }

    /// Adds the sample of a pending line; false for a line that is not one
    /// [`State::sample_line`] writes (it is dropped).
    pub fn add_line(&mut self, line: &str) -> bool {
        let f: Vec<&str> = line.split(' ').collect();
        let ["s", v, c, e, secs, d, cu] = f.as_slice() else {
            return false;
        };
        let (Some(e), Ok(secs)) = (Entry::parse(e), secs.parse::<f64>()) else {
            return false;
        };
        if !VERDICTS.contains(v) || !CHECKS.contains(c) {
            return false;
        }
        let host = (*d != "-").then_some((*d, *cu));
        self.add_raw(v, c, e, secs, host);
        true
    }

    /// The state file's text: a header, then `d VERDICT CHECK ENTRY N`,
    /// `h ENTRY SUM N...` and `host DRIVER CUDA` lines.
    pub fn to_text(&self) -> String {
        let mut out = String::from("gpu-guard-metrics 1\n");
        for ((v, c, e), n) in &self.decisions {
            let _ = writeln!(out, "d {v} {c} {e} {n}");
        }
        for (e, h) in &self.seconds {
            let counts: Vec<String> = h.counts.iter().map(u64::to_string).collect();
            let _ = writeln!(out, "h {e} {:?} {}", h.sum, counts.join(" "));
        }
        if let Some((d, c)) = &self.host {
            let _ = writeln!(out, "host {d} {c}");
        }
        out
    }

    /// Reads a state file's text. A line that is not one this version
    /// writes (or names a label value outside the known sets) is dropped,
    /// so a damaged file costs its bad lines, never a label it invents.
    pub fn from_text(text: &str) -> State {
        let mut s = State::default();
        let mut lines = text.lines();
        if lines.next() != Some("gpu-guard-metrics 1") {
            return s;
        }
        for line in lines {
            let f: Vec<&str> = line.split(' ').collect();
            match f.as_slice() {
                ["d", v, c, e, n] if VERDICTS.contains(v) && CHECKS.contains(c) => {
                    if let (Some(e), Ok(n)) = (Entry::parse(e), n.parse::<u64>()) {
                        s.decisions
                            .insert((v.to_string(), c.to_string(), e.as_str().into()), n);
                    }
                }
                ["h", e, sum, counts @ ..] if counts.len() == BUCKETS.len() + 1 => {
                    let (Some(e), Ok(sum)) = (Entry::parse(e), sum.parse::<f64>()) else {
                        continue;
                    };
                    let mut h = Histogram {
                        sum: if sum.is_finite() { sum } else { 0.0 },
                        ..Default::default()
                    };
                    let parsed: Option<Vec<u64>> = counts.iter().map(|c| c.parse().ok()).collect();
                    let Some(parsed) = parsed else {
                        continue;
                    };
                    h.counts.copy_from_slice(&parsed);
                    s.seconds.insert(e.as_str().into(), h);
                }
                ["host", d, c] => s.host = Some((version_label(d), version_label(c))),
                _ => {}
            }
        }
        s
    }

    /// The textfile: the exposition format node_exporter reads.
    pub fn render(&self, dropped: u64) -> String {
        let mut o = String::new();
        o.push_str("# HELP gpu_guard_decisions_total Container decisions of gpu-guard's hooks and runtime wrapper.\n");
        o.push_str("# TYPE gpu_guard_decisions_total counter\n");
        for ((v, c, e), n) in &self.decisions {
            let _ = writeln!(
                o,
                "gpu_guard_decisions_total{{verdict=\"{}\",check=\"{}\",entry=\"{}\"}} {n}",
                escape(v),
                escape(c),
                escape(e)
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

    fn sample(v: Verdict, check: Option<Check>, entry: Entry, secs: f64) -> Sample {
        Sample {
            verdict: v,
            check,
            entry,
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
            "gpu_guard_decisions_total{verdict=\"allow\",check=\"none\",entry=\"prestart\"} 2\n"
        ));
        assert!(text.contains(
            "gpu_guard_decisions_total{verdict=\"refuse\",check=\"requirement\",entry=\"runtime\"} 1\n"
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
        assert_eq!(line, "s refuse host runtime 0.02 535.104.05 12.2\n");
        assert!(s.add_line(line.trim_end()));
        let mut no_host = sample(Verdict::Skip, None, Entry::Prestart, 0.001);
        no_host.host = None;
        assert!(s.add_line(State::sample_line(&no_host).trim_end()));
        assert_eq!(s.decisions.len(), 2);
        assert_eq!(s.host, Some(("535.104.05".into(), "12.2".into())));
        for bad in [
            "",
            "s refuse host runtime",
            "s evil host runtime 1 - -",
            "s allow none nowhere 1 - -",
            "s allow none runtime x - -",
        ] {
            assert!(!s.add_line(bad), "{bad}");
        }
    }

    #[test]
    fn a_damaged_state_keeps_only_what_it_can_vouch_for() {
        let text = "gpu-guard-metrics 1\nd allow none runtime 5\nd allow none runtime x\nd allow \"evil runtime 1\nd allow none nosuch 1\nh runtime 1.5 1 2\nhost 535\"}\\n x\n";
        let s = State::from_text(text);
        assert_eq!(s.decisions.len(), 1);
        assert!(s.seconds.is_empty());
        assert_eq!(s.host, Some(("535n".into(), "x".into())));
        assert_eq!(
            State::from_text("garbage\nd allow none runtime 5\n"),
            State::default()
        );
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
