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

#[cfg(test)]
mod tests {
    use super::Mlp;
    use rune::prelude::*;

    /// The derive's `visit_paths` names the fields through `rune::nx` too,
    /// and checkpoints round trip from a crate that depends on rune alone.
    #[test]
    fn leaf_paths_and_checkpoints_through_rune() {
        let m = Mlp {
            w1: Tensor::from_slice(&[1.0f32, 2.0], &[2]),
            b1: Tensor::scalar(3.0f32),
            name: "mlp".into(),
        };
        assert_eq!(m.leaf_paths(), ["w1", "b1"]);
        let path =
            std::env::temp_dir().join(format!("rune_user_ckpt_{}.safetensors", std::process::id()));
        rune::nx::save(&m, &path).unwrap();
        let template = m.map_leaves(&mut |t| t.zeros_like());
        let back = rune::nx::load(&path, &template).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(back.w1.to_vec::<f32>(), vec![1.0, 2.0]);
        assert_eq!(back.b1.item::<f32>(), 3.0);
        assert_eq!(back.name, "mlp");
    }
}
