//! `#[derive(Ptree)]` for Rune's parameter trees (re-exported as `nx::Ptree`).
//!
//! Works on structs with named fields, tuple structs and unit structs, generic
//! ones too (each type parameter gets a `Ptree` bound, unless it only appears
//! in ignored fields). Fields are visited in
//! declaration order. `#[ptree(ignore)]` on a field keeps it as metadata: it is
//! cloned by `map_leaves`, taken from `self` by `map2_leaves` and skipped by
//! `for_each_leaf` and `visit_paths`, so its type must be `Clone`. Leaf
//! paths (`visit_paths`, hence `leaf_paths`) name named fields by name and
//! tuple-struct fields by index.
//!
//! The generated code names `nx` as `::nx` when the crate depends on `nx` (or
//! is `nx`), and as `::rune::nx` when it depends on `rune` alone.

#![warn(missing_docs)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2, TokenTree};
use proc_macro_crate::{crate_name, FoundCrate};
use quote::quote;
use syn::{parse_macro_input, parse_quote, Data, DeriveInput, Fields, Ident, Index, Member};

/// Derives `nx::Ptree` for a struct whose fields are parameter trees
/// (tensors, `Vec`s, maps, tuples, other `Ptree` structs), visiting the
/// fields in declaration order; `#[ptree(ignore)]` on a field keeps it as
/// `Clone` metadata instead of a subtree. See the `Ptree` trait's docs in
/// `nx` for an example. Enums and unions are refused with a compile error.
#[proc_macro_derive(Ptree, attributes(ptree))]
pub fn derive_ptree(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The path of the `nx` crate as seen from the crate being compiled.
fn nx_path() -> TokenStream2 {
    match crate_name("nx") {
        // Inside nx itself (lib, integration tests, doctests): nx declares
        // `extern crate self as nx;`, so `::nx` works everywhere.
        Ok(FoundCrate::Itself) => quote!(::nx),
        Ok(FoundCrate::Name(name)) => {
            let ident = Ident::new(&name, Span::call_site());
            quote!(::#ident)
        }
        Err(_) => match crate_name("rune") {
            Ok(FoundCrate::Itself) => quote!(::rune::nx),
            Ok(FoundCrate::Name(name)) => {
                let ident = Ident::new(&name, Span::call_site());
                quote!(::#ident::nx)
            }
            Err(_) => quote!(::nx),
        },
    }
}

struct Field {
    member: Member,
    ignore: bool,
    /// `.name` or `.0`, for map2_leaves messages.
    path_seg: TokenStream2,
}

fn is_ignored(attrs: &[syn::Attribute]) -> syn::Result<bool> {
    let mut ignore = false;
    for attr in attrs.iter().filter(|a| a.path().is_ident("ptree")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("ignore") {
                ignore = true;
                Ok(())
            } else {
                Err(meta.error("unknown ptree attribute; the only one is `#[ptree(ignore)]`"))
            }
        })?;
    }
    Ok(ignore)
}

/// The types of the fields that are not `#[ptree(ignore)]`, as tokens.
fn leaf_field_types(fields: &Fields) -> syn::Result<Vec<TokenStream2>> {
    let mut out = Vec::new();
    for f in fields {
        if !is_ignored(&f.attrs)? {
            let ty = &f.ty;
            out.push(quote!(#ty));
        }
    }
    Ok(out)
}

/// Whether the identifier `param` occurs anywhere in `tokens`.
fn mentions(tokens: TokenStream2, param: &Ident) -> bool {
    tokens.into_iter().any(|tt| match tt {
        TokenTree::Ident(i) => i == *param,
        TokenTree::Group(g) => mentions(g.stream(), param),
        _ => false,
    })
}

fn expand(mut input: DeriveInput) -> syn::Result<TokenStream2> {
    if let Some(attr) = input.attrs.iter().find(|a| a.path().is_ident("ptree")) {
        return Err(syn::Error::new_spanned(
            attr,
            "#[ptree(...)] goes on fields, not on the struct",
        ));
    }
    let nx = nx_path();
    let data = match &input.data {
        Data::Struct(s) => s,
        Data::Enum(e) => {
            return Err(syn::Error::new_spanned(
                e.enum_token,
                "#[derive(Ptree)] supports structs and tuple structs, not enums",
            ))
        }
        Data::Union(u) => {
            return Err(syn::Error::new_spanned(
                u.union_token,
                "#[derive(Ptree)] supports structs and tuple structs, not unions",
            ))
        }
    };

    let mut fields = Vec::new();
    match &data.fields {
        Fields::Named(named) => {
            for f in &named.named {
                let ident = f.ident.clone().expect("named field");
                let name = ident.to_string();
                let name = name.strip_prefix("r#").unwrap_or(&name).to_string();
                fields.push(Field {
                    member: Member::Named(ident),
                    ignore: is_ignored(&f.attrs)?,
                    path_seg: quote!(#nx::__ptree::field(#name)),
                });
            }
        }
        Fields::Unnamed(unnamed) => {
            for (i, f) in unnamed.unnamed.iter().enumerate() {
                fields.push(Field {
                    member: Member::Unnamed(Index::from(i)),
                    ignore: is_ignored(&f.attrs)?,
                    path_seg: quote!(#nx::__ptree::pos(#i)),
                });
            }
        }
        Fields::Unit => {}
    }

    // A `Ptree` bound per type parameter, except those that only appear in
    // ignored fields (metadata need not be a tree).
    let leaf_types: Vec<TokenStream2> = leaf_field_types(&data.fields)?;
    let type_params: Vec<Ident> = input
        .generics
        .type_params()
        .map(|p| p.ident.clone())
        .filter(|p| leaf_types.iter().any(|ty| mentions(ty.clone(), p)))
        .collect();
    if !type_params.is_empty() {
        let where_clause = input.generics.make_where_clause();
        for p in &type_params {
            where_clause.predicates.push(parse_quote!(#p: #nx::Ptree));
        }
    }
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();

    let map_fields = fields.iter().map(|fl| {
        let m = &fl.member;
        if fl.ignore {
            quote!(#m: ::core::clone::Clone::clone(&self.#m))
        } else {
            quote!(#m: #nx::Ptree::map_leaves(&self.#m, f))
        }
    });
    let map2_fields = fields.iter().map(|fl| {
        let m = &fl.member;
        let seg = &fl.path_seg;
        if fl.ignore {
            quote!(#m: ::core::clone::Clone::clone(&self.#m))
        } else {
            quote!(#m: {
                let _path = #seg;
                #nx::Ptree::map2_leaves(&self.#m, &other.#m, f)
            })
        }
    });
    let path_fields = fields.iter().filter(|fl| !fl.ignore).map(|fl| {
        let m = &fl.member;
        let seg = match m {
            Member::Named(ident) => {
                let name = ident.to_string();
                name.strip_prefix("r#").unwrap_or(&name).to_string()
            }
            Member::Unnamed(i) => i.index.to_string(),
        };
        quote!(#nx::Ptree::visit_paths(&self.#m, &#nx::__ptree::join(prefix, #seg), out);)
    });
    let each_fields = fields.iter().filter(|fl| !fl.ignore).map(|fl| {
        let m = &fl.member;
        quote!(#nx::Ptree::for_each_leaf(&self.#m, f);)
    });

    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #nx::Ptree for #name #ty_generics #where_clause {
            #[allow(unused_variables)]
            fn map_leaves(
                &self,
                f: &mut dyn ::core::ops::FnMut(&#nx::Tensor) -> #nx::Tensor,
            ) -> Self {
                Self { #(#map_fields,)* }
            }

            #[allow(unused_variables)]
            fn map2_leaves(
                &self,
                other: &Self,
                f: &mut dyn ::core::ops::FnMut(&#nx::Tensor, &#nx::Tensor) -> #nx::Tensor,
            ) -> Self {
                Self { #(#map2_fields,)* }
            }

            #[allow(unused_variables)]
            fn for_each_leaf(&self, f: &mut dyn ::core::ops::FnMut(&#nx::Tensor)) {
                #(#each_fields)*
            }

            #[allow(unused_variables)]
            fn visit_paths(
                &self,
                prefix: &str,
                out: &mut ::std::vec::Vec<::std::string::String>,
            ) {
                #(#path_fields)*
            }
        }
    })
}
