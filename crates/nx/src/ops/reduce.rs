//! Reductions (sum, mean, max, min, prod, var, std, all, any, argmax, argmin,
//! logsumexp), softmax, log_softmax, cumsum, cumprod.
