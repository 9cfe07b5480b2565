//! The stable hash behind cache keys and program structure keys.

use std::hash::{Hash, Hasher};

/// A 128-bit hash, stable for a given build of this crate (the key also
/// covers the executable, so hash stability across builds is not needed).
pub fn hash(parts: &[&[u8]]) -> String {
    let mut out = String::new();
    for seed in [0x746f6c6bu64, 0x72756e65] {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        seed.hash(&mut h);
        for p in parts {
            p.hash(&mut h);
        }
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}
