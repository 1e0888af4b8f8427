//! A fast 64-bit hash for data gpu-guard itself trusts: the text of the
//! config files and of NVIDIA's toolkit config (the key of the parsed
//! config kept between starts) and the names of the library globs. Both are read at every container start,
//! where SipHash (std's default, built to resist chosen collisions from
//! untrusted keys) cost several instructions a byte. Neither is chosen by
//! a container: the config files are root's own and trust-checked first.
//!
//! Each 8-byte word goes through one step that is a bijection of the state
//! for a fixed word and of the word for a fixed state (xor, multiply by an
//! odd constant, rotate), so two inputs that differ in one word always hash
//! differently. Four lanes take the words of each 32-byte block in turn, so
//! their multiplications overlap; the lanes are folded and finished with
//! MurmurHash3's 64-bit mixer (fmix64) so that every input bit reaches
//! every output bit.

use std::hash::Hasher;

/// An odd constant with well-spread bits (2^64 / the golden ratio).
const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// Each lane starts apart, so the same word in two lanes counts apart.
const SEEDS: [u64; 4] = [0, K, K.rotate_left(16), K.rotate_left(32)];

#[derive(Clone, Copy)]
pub struct WordHasher([u64; 4]);

impl Default for WordHasher {
    fn default() -> Self {
        WordHasher(SEEDS)
    }
}

fn step(lane: u64, word: u64) -> u64 {
    (lane ^ word).wrapping_mul(K).rotate_left(29)
}

fn word(bytes: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(w)
}

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut blocks = bytes.chunks_exact(32);
        for block in &mut blocks {
            for (lane, w) in self.0.iter_mut().zip(block.chunks_exact(8)) {
                *lane = step(*lane, word(w));
            }
        }
        // The rest, under 32 bytes: whole words and a tail, lane by lane.
        for (lane, w) in self.0.iter_mut().zip(blocks.remainder().chunks(8)) {
            *lane = step(*lane, word(w));
        }
        // The length keeps "a" apart from "a\0" and from a split write.
        self.0[0] = step(self.0[0], bytes.len() as u64);
    }
    fn finish(&self) -> u64 {
        let [a, b, c, d] = self.0;
        let mut h = a ^ b.rotate_left(17) ^ c.rotate_left(31) ^ d.rotate_left(47);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hash;

    fn hash(v: impl Hash) -> u64 {
        let mut h = WordHasher::default();
        v.hash(&mut h);
        h.finish()
    }

    #[test]
    fn every_changed_byte_changes_the_hash() {
        let text = include_str!("../../config/config.toml").as_bytes();
        let whole = hash(text);
        let mut seen = std::collections::HashSet::new();
        for at in (0..text.len()).step_by(13) {
            let mut edited = text.to_vec();
            edited[at] ^= 0x20;
            let h = hash(&edited[..]);
            assert_ne!(h, whole, "byte {at}");
            assert!(seen.insert(h), "two edits collide at byte {at}");
        }
        // A byte more or less, and the same bytes split differently.
        assert_ne!(hash(&text[1..]), whole);
        assert_ne!(
            hash((&text[..10], &text[10..])),
            hash((&text[..11], &text[11..]))
        );
        assert_ne!(hash("a"), hash("a\0"));
        assert_ne!(hash(""), hash(()));
    }

    #[test]
    fn short_names_spread() {
        let names: Vec<String> = (0..20_000).map(|i| format!("lib{i}.so")).collect();
        let low_bits: std::collections::HashSet<u64> =
            names.iter().map(|n| hash(n) & 0xffff).collect();
        // 20,000 names in 65,536 buckets: a uniform hash fills about 17,000.
        assert!(low_bits.len() > 15_000, "{}", low_bits.len());
    }
}
