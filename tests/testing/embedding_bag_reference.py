"""A NumPy reference for EmbeddingBag and random calls to check against it, shared by the
Python client's and the CLI's tests (tests/client/python_client_test.py, cli_test.py) and the
KServe v2 tests (tests/server/kserve_grpc_test.py, kserve_http_test.py: kserve_inputs and
kserve_parameters send a random call as the embedding_bag model's inputs and parameters).

    params, indices, kwargs = random_bag_case(rng, np.float32, "mean", True, False)
    want, bound = ref_embedding_bag(params, indices, **kwargs)   # kwargs as embedding_bag's

The semantics are tensorcompute.proto's EmbeddingBagRequest (core/embedding_bag.h); the
arithmetic is core/embedding_bag_math.h's, re-done here one row at a time.
"""

import ml_dtypes
import numpy as np

EB_FLOAT_DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
EB_MODES = ["sum", "mean", "max", "sqrtn"]

# Per params dtype: the dtype it accumulates in, its mantissa bits and its smallest subnormal.
_EB_FLOATS = {
    np.dtype(np.float16): (np.float32, 10, 2.0 ** -24),
    np.dtype(ml_dtypes.bfloat16): (np.float32, 7, 2.0 ** -133),
    np.dtype(np.float32): (np.float32, 23, 2.0 ** -149),
    np.dtype(np.float64): (np.float64, 52, 5e-324),
}


def ref_embedding_bag(params, indices, offsets=None, per_sample_weights=None, mode="sum",
                      include_last_offset=False, padding_idx=None):
    """The server's EmbeddingBag as a NumPy loop: one bag, then one row at a time in index
    order, accumulating in float32 (float64 for float64 params), then the division, then one
    rounding to the params' dtype (a NaN as the positive quiet NaN). Returns (output, bound).

    Unweighted SUM and MAX do here exactly what the server does (a sequential float32 sum from
    +0, or torch's first-then-strictly-greater rule), so the answer must equal `output` bit
    for bit: bound is None. Weighted terms are one fma on the server but a rounded product and
    a rounded sum here, and MEAN and SQRTN divide by a count or a sum of weights (squares with
    fma on the server): there bound[b, j] is the largest |server - output| allowed, a tight
    one: (2n + 4) accumulation epsilons of sum |w x| / |divisor| for a bag of n rows (the
    terms, the divisor and the division), plus one ulp of the output dtype each side of the
    final rounding, plus its smallest subnormal.
    """
    params, indices, mode = np.asarray(params), np.asarray(indices), mode.lower()
    acc_t, mantissa_bits, tiny = _EB_FLOATS[params.dtype]
    table = params.astype(acc_t)
    rows, dim = table.shape
    flat = indices.reshape(-1).astype(np.int64)
    weights = None if per_sample_weights is None else \
        np.asarray(per_sample_weights).reshape(-1).astype(acc_t)
    if indices.ndim == 2:
        n = indices.shape[1]
        spans = [(b * n, (b + 1) * n) for b in range(indices.shape[0])]
    else:
        starts = [int(o) for o in offsets]
        ends = starts[1:] if include_last_offset else starts[1:] + [len(flat)]
        spans = list(zip(starts, ends))
    pad = None if padding_idx is None else padding_idx % rows
    out = np.zeros((len(spans), dim), acc_t)
    slack = np.zeros((len(spans), dim))
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is NaN, as on the server
        _accumulate(table, flat, weights, spans, mode, pad, out, slack)
    # A NaN result is written as the positive quiet NaN (core's CanonicalNan), whatever NaN the
    # arithmetic made.
    output = np.where(np.isnan(out), acc_t(np.nan), out).astype(params.dtype)
    if mode in ("sum", "max") and weights is None:
        return output, None
    ulp = 2.0 ** -mantissa_bits * np.abs(output.astype(np.float64))
    return output, slack + 2 * ulp + tiny


def _accumulate(table, flat, weights, spans, mode, pad, out, slack):
    """ref_embedding_bag's loop: fills out[b] (before the final rounding) and slack[b] (its
    accumulation error bound) for each bag b."""
    acc_t = table.dtype.type
    rows, dim = table.shape
    for b, (begin, end) in enumerate(spans):
        acc = np.zeros(dim, acc_t)
        count, sum_w, sum_w2 = 0, acc_t(0), acc_t(0)
        magnitude = np.zeros(dim)
        for i in range(begin, end):
            row = int(flat[i]) % rows
            if row == pad:
                continue
            x, w = table[row], acc_t(1) if weights is None else weights[i]
            if mode == "max":
                acc = x.copy() if count == 0 else np.where(x > acc, x, acc)
            elif weights is None:
                acc = acc + x
            else:
                acc = acc + w * x
            count, sum_w, sum_w2 = count + 1, sum_w + w, sum_w2 + w * w
            magnitude += np.abs(np.float64(w) * x.astype(np.float64))
        if count == 0:
            continue  # zeros in every mode
        divisor = acc_t(1)
        if mode == "mean":
            divisor = acc_t(count) if weights is None else sum_w
        elif mode == "sqrtn":
            divisor = np.sqrt(acc_t(count) if weights is None else sum_w2)
        out[b] = acc / divisor
        slack[b] = (2 * count + 4) * np.finfo(acc_t).eps * magnitude / abs(float(divisor))


def random_bag_case(rng, dtype, mode, weighted, fixed_bags, table=None):
    """A random valid embedding_bag call: (params, indices, keyword arguments). With `table`
    (a [rows, dim] array of `dtype`, e.g. a resident tensor's values), params is that table."""
    if table is None:
        rows, dim = int(rng.integers(1, 30)), int(rng.integers(1, 20))
        params = (rng.standard_normal((rows, dim)) * 4).astype(dtype)
    else:
        params = table
        rows = table.shape[0]
    bags = int(rng.integers(0, 12))
    index_dtype, offsets_dtype = (np.int32, np.int64)[rng.integers(2)], \
        (np.int32, np.int64)[rng.integers(2)]
    kwargs = {"mode": mode}
    if fixed_bags:
        indices = _random_indices(rng, rows, (bags, int(rng.integers(0, 6))), index_dtype)
    else:
        sizes = rng.integers(0, 7, size=bags)
        indices = _random_indices(rng, rows, (int(sizes.sum()),), index_dtype)
        ends = np.cumsum(np.concatenate([[0], sizes]))  # bags + 1 entries
        kwargs["include_last_offset"] = bool(rng.integers(2))
        kwargs["offsets"] = (ends if kwargs["include_last_offset"] else ends[:-1]).astype(
            offsets_dtype)
    if weighted:
        weights_dtype = dtype if rng.integers(2) else np.float32
        # Positive, so that a weighted MEAN's divisor is far from 0.
        kwargs["per_sample_weights"] = rng.uniform(0.5, 1.5, indices.shape).astype(
            weights_dtype)
    if rng.random() < 0.3:
        kwargs["padding_idx"] = int(rng.integers(-rows, rows))
    return params, indices, kwargs


def mismatch(out, want, bound):
    """None when `out` (an answer) agrees with ref_embedding_bag's (want, bound): same dtype and
    shape, and the same bytes (bound None) or every element within its bound; else what
    differs, in words."""
    if out.dtype != want.dtype or out.shape != want.shape:
        return f"got {out.dtype}{list(out.shape)}, want {want.dtype}{list(want.shape)}"
    if bound is None:
        if out.tobytes() == want.tobytes():
            return None
        at = tuple(np.argwhere(out.view(np.uint8).reshape(out.shape + (-1,)) !=
                               want.view(np.uint8).reshape(want.shape + (-1,)))[0][:-1])
        return f"not bit for bit: at {at}: got {out[at]!r}, want {want[at]!r}"
    error = np.abs(out.astype(np.float64) - want.astype(np.float64))
    over = np.argwhere(~(error <= bound))  # NaN is over too
    if not over.size:
        return None
    at = tuple(over[0])
    return (f"{len(over)} elements over the bound; at {at}: got {out[at]!r}, want {want[at]!r}, "
            f"error {error[at]}, bound {bound[at]}")


def _random_indices(rng, rows, shape, dtype):
    """Index values in [-rows, rows): negative ones included."""
    return rng.integers(-rows, rows, size=shape).astype(dtype)


# KServe v2 datatypes of the arrays random_bag_case makes.
_KSERVE_DATATYPES = {
    np.dtype(np.float16): "FP16", np.dtype(ml_dtypes.bfloat16): "BF16",
    np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64",
    np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64",
}


def kserve_inputs(params, indices, kwargs):
    """A random_bag_case call as the KServe v2 embedding_bag model's inputs, in input order:
    {name: (datatype, array)}. `params` None: a table's request (no params input)."""
    arrays = {"params": params, "indices": indices, "offsets": kwargs.get("offsets"),
              "per_sample_weights": kwargs.get("per_sample_weights")}
    return {name: (_KSERVE_DATATYPES[np.asarray(a).dtype], np.asarray(a))
            for name, a in arrays.items() if a is not None}


def kserve_parameters(kwargs, op=False, mode_case=str.upper):
    """A random_bag_case call's request parameters: `mode` written with `mode_case` (the server
    takes any case), include_last_offset and padding_idx when set; with `op`, op=embedding_bag
    (a resident table's request)."""
    parameters = {"mode": mode_case(kwargs["mode"])}
    if op:
        parameters["op"] = "embedding_bag"
    if kwargs.get("include_last_offset"):
        parameters["include_last_offset"] = True
    if "padding_idx" in kwargs:
        parameters["padding_idx"] = kwargs["padding_idx"]
    return parameters
