//! Linear algebra: matmul, dot, outer, tril, triu.
