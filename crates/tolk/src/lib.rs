//! tolk: the compiler (graph IR, fusion, code generation, runtime). Empty until the jit issue.
