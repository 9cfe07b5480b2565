//! The signature check every collective makes first, so that a call whose
//! structure, dtypes or shapes differ between ranks is an error on every
//! rank rather than a hang or garbage: each rank hashes what it is about to
//! do (the operation, its root or axis, and every leaf's path, dtype and
//! shape) and the hashes are all-gathered (8 bytes per rank). Equal: the
//! collective goes ahead. Not: every rank sees it, so every rank takes the
//! slow path together, all-gathers the full descriptions and panics with
//! the same message naming the first leaf that differs and the ranks.

use super::transport;
use nx::Tensor;

/// One rank's description of a collective call.
struct Signature {
    what: String,
    leaves: Vec<String>,
}

fn describe(paths: &[String], leaves: &[Tensor]) -> Vec<String> {
    leaves
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let path = paths.get(i).map(String::as_str).unwrap_or("");
            let path = if path.is_empty() {
                format!("leaf {i}")
            } else {
                format!("leaf {i} ({path})")
            };
            format!("{path}: {} {:?}", t.dtype().name(), t.shape())
        })
        .collect()
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf29ce484222325u64;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

impl Signature {
    fn encode(&self) -> String {
        let mut s = self.what.clone();
        for l in &self.leaves {
            s.push('\n');
            s.push_str(l);
        }
        s
    }

    fn decode(s: &str) -> Signature {
        let mut lines = s.split('\n');
        Signature {
            what: lines.next().unwrap_or("").to_string(),
            leaves: lines.map(str::to_string).collect(),
        }
    }
}

/// Checks that every rank calls `what` (the operation and its root or
/// axis, e.g. `"broadcast from rank 0"`) on leaves of the same paths,
/// dtypes and shapes; panics on every rank, naming the first leaf that
/// differs and what each rank has there, if not. `func` names the caller
/// in the message.
pub(crate) fn same_on_every_rank(func: &str, what: &str, paths: &[String], leaves: &[Tensor]) {
    let (_, size) = transport::init();
    if size == 1 {
        return;
    }
    let mine = Signature {
        what: what.to_string(),
        leaves: describe(paths, leaves),
    }
    .encode();
    let hashes = transport::all_gather_bytes(&fnv(mine.as_bytes()).to_le_bytes());
    if hashes.chunks(8).all(|h| h == &hashes[..8]) {
        return;
    }
    // Every rank saw the same hashes, so every rank is here.
    let all: Vec<Signature> = transport::all_gather_varying(mine.as_bytes())
        .iter()
        .map(|b| Signature::decode(&String::from_utf8_lossy(b)))
        .collect();
    panic!("{}", mismatch(func, &all));
}

/// The message for signatures that differ: the first difference, and what
/// each rank has there.
fn mismatch(func: &str, all: &[Signature]) -> String {
    let ranks = |f: &dyn Fn(&Signature) -> String| -> String {
        // Ranks grouped by what they have, in rank order of first sight.
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for (r, s) in all.iter().enumerate() {
            let v = f(s);
            match groups.iter_mut().find(|(g, _)| *g == v) {
                Some((_, rs)) => rs.push(r),
                None => groups.push((v, vec![r])),
            }
        }
        groups
            .iter()
            .map(|(v, rs)| match rs.as_slice() {
                [r] => format!("rank {r}: {v}"),
                _ => format!("ranks {rs:?}: {v}"),
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    if all.iter().any(|s| s.what != all[0].what) {
        return format!(
            "{func}: the ranks called different collectives: {}",
            ranks(&|s| s.what.clone())
        );
    }
    if all.iter().any(|s| s.leaves.len() != all[0].leaves.len()) {
        return format!(
            "{func}: the ranks passed trees of different structure: {}",
            ranks(&|s| format!("{} leaves", s.leaves.len()))
        );
    }
    let i = (0..all[0].leaves.len())
        .find(|&i| all.iter().any(|s| s.leaves[i] != all[0].leaves[i]))
        .expect("signatures differ somewhere");
    format!(
        "{func}: leaf {i} differs across ranks (every rank must pass the same structure, \
         dtypes and shapes): {}",
        ranks(&|s| s.leaves[i].clone())
    )
}
