//! The kernel's cpulist format (`0-15,32-47`): sysfs `local_cpulist`,
//! `/sys/devices/system/cpu/online`, `node/has_memory`, and cgroup
//! `cpuset.cpus`/`cpuset.mems` (Documentation/admin-guide/cgroup-v2.rst,
//! "Cpuset Interface Files"; lib/bitmap.c `bitmap_parselist`, which also
//! reads `a-b:g/w` strides, written here as the CPUs they name).
//!
//! A set is kept as sorted, disjoint, non-adjacent inclusive ranges, so a
//! list of 8192 CPUs costs a few entries.

/// The largest CPU or node number read: Linux's NR_CPUS tops out at 8192
/// (arch/x86/Kconfig `NR_CPUS_RANGE_END`); a bigger number is an error,
/// never a huge allocation.
pub const MAX_ID: u32 = 1 << 16;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuList {
    ranges: Vec<(u32, u32)>,
}

impl CpuList {
    /// Reads a cpulist; surrounding whitespace (the newline of a sysfs
    /// file) is ignored and an empty list is the empty set.
    pub fn parse(text: &str) -> Result<CpuList, String> {
        let mut ranges = Vec::new();
        let t = text.trim();
        if t.is_empty() {
            return Ok(CpuList::default());
        }
        for part in t.split(',') {
            let part = part.trim();
            let (range, stride) = match part.split_once(':') {
                Some((r, s)) => (r, Some(s)),
                None => (part, None),
            };
            let (a, b) = match range.split_once('-') {
                Some((a, b)) => (num(a, part)?, num(b, part)?),
                None => {
                    let n = num(range, part)?;
                    (n, n)
                }
            };
            if a > b {
                return Err(format!("`{part}` is a range that runs backwards"));
            }
            match stride {
                None => ranges.push((a, b)),
                Some(s) => {
                    let (used, group) = s
                        .split_once('/')
                        .ok_or_else(|| format!("`{part}` is not a cpulist range"))?;
                    let (used, group) = (num(used, part)?, num(group, part)?);
                    if used == 0 || group == 0 || used > group {
                        return Err(format!("`{part}` is not a cpulist range"));
                    }
                    let mut start = a;
                    while start <= b {
                        ranges.push((start, (start + used - 1).min(b)));
                        // Both below MAX_ID: no overflow.
                        start += group;
                    }
                }
            }
        }
        Ok(CpuList::from_ranges(ranges))
    }

    fn from_ranges(mut ranges: Vec<(u32, u32)>) -> CpuList {
        ranges.sort_unstable();
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for (a, b) in ranges {
            match out.last_mut() {
                Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        CpuList { ranges: out }
    }

    /// The set of one number.
    pub fn single(n: u32) -> CpuList {
        CpuList {
            ranges: vec![(n, n)],
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn contains(&self, n: u32) -> bool {
        self.ranges.iter().any(|&(a, b)| a <= n && n <= b)
    }

    pub fn union(&self, other: &CpuList) -> CpuList {
        let mut all = self.ranges.clone();
        all.extend_from_slice(&other.ranges);
        CpuList::from_ranges(all)
    }

    pub fn intersect(&self, other: &CpuList) -> CpuList {
        let mut out = Vec::new();
        for &(a, b) in &self.ranges {
            for &(c, d) in &other.ranges {
                let (lo, hi) = (a.max(c), b.min(d));
                if lo <= hi {
                    out.push((lo, hi));
                }
            }
        }
        CpuList::from_ranges(out)
    }

    /// How many numbers the set holds.
    pub fn count(&self) -> u64 {
        self.ranges.iter().map(|&(a, b)| u64::from(b - a) + 1).sum()
    }
}

fn num(s: &str, part: &str) -> Result<u32, String> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{part}` is not a cpulist range"));
    }
    match s.parse::<u32>() {
        Ok(n) if n < MAX_ID => Ok(n),
        _ => Err(format!("`{part}` names a CPU beyond {}", MAX_ID - 1)),
    }
}

impl std::fmt::Display for CpuList {
    /// The canonical form the kernel writes: `0-15,32-47`, `1`, or "".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, &(a, b)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if a == b {
                write!(f, "{a}")?;
            } else {
                write!(f, "{a}-{b}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_writes_the_kernel_form() {
        for (text, want) in [
            ("0-15,32-47\n", "0-15,32-47"),
            ("1", "1"),
            ("", ""),
            (" 3,1,2 ", "1-3"),
            ("0-3,2-5,7", "0-5,7"),
            ("0-7:2/4", "0-1,4-5"),
            ("0-9:1/3", "0,3,6,9"),
        ] {
            assert_eq!(CpuList::parse(text).unwrap().to_string(), want, "{text:?}");
        }
        for bad in [
            "a", "1-", "-1", "3-1", "1,,2", "0-7:0/4", "0-7:5/4", "99999999",
        ] {
            assert!(CpuList::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn set_operations() {
        let a = CpuList::parse("0-15,32-47").unwrap();
        let b = CpuList::parse("8-40").unwrap();
        assert_eq!(a.intersect(&b).to_string(), "8-15,32-40");
        assert_eq!(a.union(&b).to_string(), "0-47");
        assert_eq!(a.count(), 32);
        assert!(a.contains(33) && !a.contains(20));
        assert!(a.intersect(&CpuList::parse("16-31").unwrap()).is_empty());
        assert_eq!(CpuList::single(0).to_string(), "0");
    }

    #[test]
    fn huge_ranges_cost_nothing() {
        let l = CpuList::parse("0-65535").unwrap();
        assert_eq!(l.count(), 65536);
        assert!(CpuList::parse("0-65536").is_err());
        let s = CpuList::parse("0-65535:1/2").unwrap();
        assert_eq!(s.count(), 32768);
    }
}
