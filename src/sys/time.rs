//! Timestamps for the runtime log.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The current time as RFC 3339 in UTC with up to nanosecond precision and
/// trailing zeros dropped (`2026-11-30T20:09:10.123456789Z`), the shape of Go's
/// `time.RFC3339Nano`: what logrus writes and what containerd's shim parses
/// (Go's RFC 3339 parser takes any number of fractional digits).
pub fn rfc3339_now() -> String {
    format_rfc3339(OffsetDateTime::now_utc())
}

fn format_rfc3339(t: OffsetDateTime) -> String {
    // Rfc3339 refuses only years outside 0..=9999 and non-UTC sub-minute
    // offsets; neither can come from the system clock in UTC.
    t.format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_shape() {
        let t = rfc3339_now();
        assert!(t.len() >= 20 && t.len() <= 30, "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
        assert!(t.starts_with("20"), "{t}");
    }

    #[test]
    fn formats_like_go_rfc3339nano() {
        let t = OffsetDateTime::from_unix_timestamp_nanos(1_796_069_350_123_456_000).unwrap();
        assert_eq!(format_rfc3339(t), "2026-11-30T20:09:10.123456Z");
        let t = OffsetDateTime::from_unix_timestamp(1_796_069_350).unwrap();
        assert_eq!(format_rfc3339(t), "2026-11-30T20:09:10Z");
        let t = OffsetDateTime::from_unix_timestamp_nanos(1_796_069_350_000_000_007).unwrap();
        assert_eq!(format_rfc3339(t), "2026-11-30T20:09:10.000000007Z");
    }
}
