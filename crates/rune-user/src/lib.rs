//! A stand-in for a user's crate: it depends on `rune` alone (not on `nx`), so
//! `#[derive(Ptree)]` must name the trait through `rune::nx`.

use rune::prelude::*;

#[derive(Ptree, Clone)]
pub struct Mlp {
    pub w1: Tensor,
    pub b1: Tensor,
    #[ptree(ignore)]
    pub name: String,
}
