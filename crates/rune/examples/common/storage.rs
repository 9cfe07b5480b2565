//! What a steady-state call allocates, for the benchmarks' storage lines
//! (issue 44's "new storage per call"): nx's storage counters across one
//! call made after two warmup calls.

use rune::prelude::*;

/// Prints on stderr, for one steady-state call of `f`: the bytes of the
/// tensor buffers it was handed (`nx::storage::allocated_bytes`: fresh or
/// reused from nx's cache), how many of them are its outputs', and the
/// bytes it took from the system allocator (`nx::storage::system_bytes`).
pub fn storage_line<T: Ptree>(id: &str, f: impl Fn() -> T) {
    drop(f());
    drop(f());
    let (handed, system) = (
        rune::nx::storage::allocated_bytes(),
        rune::nx::storage::system_bytes(),
    );
    let out = f();
    let handed = rune::nx::storage::allocated_bytes() - handed;
    let system = rune::nx::storage::system_bytes() - system;
    let outputs: usize = out
        .leaves()
        .iter()
        .map(|t| t.numel() * t.dtype().size_in_bytes())
        .sum();
    eprintln!(
        "storage {id}: {handed} B of buffers per call, {outputs} B of them its outputs, \
         {} B besides; {system} B from the system allocator",
        handed as i64 - outputs as i64
    );
}
