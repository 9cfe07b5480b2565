//! Indexing: take, take_along_axis, gather, scatter_add, one_hot.
