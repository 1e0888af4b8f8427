//! A bound on how deeply a CDI spec nests, found before it is parsed.
//!
//! libyaml (under serde_yaml_ng) keeps one pending simple key per flow
//! level and looks at all of them on every token (scanner.c
//! `yaml_parser_stale_simple_keys`), so `[[[[...]]]]` 60,000 levels deep
//! (120 KB) costs seconds, growing with the square of the depth; serde's
//! recursion limit only applies after the whole document was scanned. No
//! spec CDI tools write nests more than a handful of levels (NVIDIA's:
//! five), so a text that may nest deeper than [`MAX_NESTING`] is not
//! parsed at all.
//!
//! The scan is one pass, linear, and errs high, never low: flow
//! collections (`[`, `{`) are counted outside quoted scalars and comments
//! (JSON is all flow); block nesting is bounded by each line's indentation
//! and its compact `- `/`? ` indicators (every block level takes a column
//! of indentation or an indicator; a mapping value may sit at its key's
//! column, hence twice that); the content of block scalars (`|`, `>`) is
//! skipped.

/// Deeper than this, a spec is not parsed.
pub const MAX_NESTING: usize = 256;

/// Whether `text` may nest deeper than `limit` levels.
pub fn may_nest_deeper(text: &[u8], limit: usize) -> bool {
    let mut s = Scan::default();
    for line in text.split(|b| *b == b'\n') {
        if s.line(line) > limit {
            return true;
        }
    }
    false
}

#[derive(Default)]
struct Scan {
    /// Open flow collections.
    flow: usize,
    /// Inside a quoted scalar that continues on the next line.
    quote: Option<u8>,
    /// Inside a block scalar whose parent line is indented this much.
    block_scalar: Option<usize>,
}

impl Scan {
    /// Scans one line; the deepest nesting it may reach.
    fn line(&mut self, line: &[u8]) -> usize {
        let indent = line
            .iter()
            .take_while(|b| **b == b' ' || **b == b'\t')
            .count();
        if let Some(parent) = self.block_scalar {
            if indent > parent || line[indent..].iter().all(|b| b.is_ascii_whitespace()) {
                return 0;
            }
            self.block_scalar = None;
        }
        let markers = line[indent..]
            .iter()
            .take_while(|b| matches!(b, b'-' | b'?' | b' ' | b'\t'))
            .filter(|b| matches!(b, b'-' | b'?'))
            .count();
        let block = 2 * (indent + markers) + 2;
        let mut deepest = block + self.flow;
        // Where a scalar may start: a quote or bracket there opens one.
        let mut at_start = self.quote.is_none();
        let mut i = 0;
        while i < line.len() {
            let b = line[i];
            if let Some(q) = self.quote {
                if b == b'\\' && q == b'"' {
                    i += 2;
                    continue;
                }
                if b == q {
                    if q == b'\'' && line.get(i + 1) == Some(&b'\'') {
                        i += 2;
                        continue;
                    }
                    self.quote = None;
                }
                i += 1;
                continue;
            }
            match b {
                b'#' if i == 0 || line[i - 1] == b' ' || line[i - 1] == b'\t' => break,
                b'\'' | b'"' if at_start => self.quote = Some(b),
                b'[' | b'{' if at_start || self.flow > 0 => {
                    self.flow += 1;
                    deepest = deepest.max(block + self.flow);
                }
                b']' | b'}' if self.flow > 0 => self.flow -= 1,
                b'|' | b'>' if at_start && self.flow == 0 => {
                    self.block_scalar = Some(indent);
                    break;
                }
                _ => {}
            }
            at_start = match b {
                // In a flow collection a scalar may follow its indicators
                // directly (`[a,b]`, `{"a":"b"}`); a bracket inside a
                // plain scalar (`x[0]`) is none.
                b'[' | b'{' | b',' | b':' => self.flow > 0,
                b' ' | b'\t' => at_start || prev_opens(line, i),
                _ => false,
            };
            i += 1;
        }
        deepest
    }
}

/// Whether the blank at `i` follows an indicator after which a scalar may
/// start (`: `, `- `, `? `).
fn prev_opens(line: &[u8], i: usize) -> bool {
    i > 0 && matches!(line[i - 1], b':' | b'-' | b'?')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(text: &str) -> usize {
        (0..400)
            .find(|l| !may_nest_deeper(text.as_bytes(), *l))
            .unwrap_or(400)
    }

    #[test]
    fn counts_what_can_nest_and_skips_what_cannot() {
        // NVIDIA's spec shape stays far below the bound.
        let nvidia = "---\ncdiVersion: 0.5.0\ncontainerEdits:\n  deviceNodes:\n  - path: /dev/nvidia-uvm\n  hooks:\n  - args:\n    - nvidia-cdi-hook\n    hookName: createContainer\n    path: /usr/bin/nvidia-cdi-hook\n  mounts:\n  - containerPath: /lib/x\n    options: [ro, nosuid, nodev, bind]\ndevices:\n- containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n  name: \"0\"\nkind: nvidia.com/gpu\n";
        assert!(depth(nvidia) < 24, "{}", depth(nvidia));
        let json = r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}}]}"#;
        assert!(depth(json) <= 8, "{}", depth(json));
        // Deep flow nesting, deep compact block sequences.
        assert!(may_nest_deeper(&vec![b'['; 60_000], MAX_NESTING));
        assert!(may_nest_deeper("- ".repeat(60_000).as_bytes(), MAX_NESTING));
        assert!(may_nest_deeper(
            format!("a: {}", "{".repeat(300)).as_bytes(),
            MAX_NESTING
        ));
        // Brackets in quotes, comments, plain scalars and block scalars do not nest.
        let quiet = format!(
            "a: \"{0}\"\nb: '{0}'\n# {0}\nc: x{0}\nd: |\n  {0}\n  '\ne: it's\nf: \"esc\\\"{0}\"\n",
            "[".repeat(300)
        );
        assert!(
            !may_nest_deeper(quiet.as_bytes(), MAX_NESTING),
            "{}",
            depth(&quiet)
        );
    }
}
