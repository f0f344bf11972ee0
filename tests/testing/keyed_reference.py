"""The reference of keyed tables (issue 42) for the tests that look them up by keys, natively
(tests/client/keyed_tables_test.py) and over KServe (tests/server/kserve_keys_test.py).

A keyed table put with rows R and keys K answers a lookup by keys as the same lookup by indices
on the "extended" table R + [zeros] + [default row] would, each key replaced by its row (key ->
position in K), a missing one by the zero row (missing "zero", and "skip" in bags as
padding_idx) or the default row ("default").
"""

import numpy as np

INT64_MIN, INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
SPECIAL_KEYS = [INT64_MIN, INT64_MAX, 0, -1, 1]


def random_keys(rng, n):
    """n unique int64 keys in random order, the extremes, 0 and +-1 among them when n >= 5."""
    drawn = rng.integers(INT64_MIN, INT64_MAX, size=2 * n + 8, dtype=np.int64, endpoint=True)
    pool = np.unique(np.concatenate([np.array(SPECIAL_KEYS, np.int64), drawn]))
    special = pool[np.isin(pool, SPECIAL_KEYS)]
    others = rng.permutation(pool[~np.isin(pool, SPECIAL_KEYS)])
    keys = np.concatenate([special, others])[:n]
    return rng.permutation(keys)


class KeyedReference:
    """A keyed table as a dict from key to row, over the extended table (rows, then the zero
    row, then the default row). `n` is the number of keys (the zero row's index)."""

    def __init__(self, rows, keys, default_row=None):
        self.n = len(keys)
        self.slot = {int(k): i for i, k in enumerate(keys)}
        zero = np.zeros((1,) + rows.shape[1:], rows.dtype)
        default = zero if default_row is None else np.asarray(default_row, rows.dtype)[None]
        self.extended = np.concatenate([rows, zero, default])

    def slots(self, keys, missing):
        """The extended table's row of each key (same shape), and the found mask."""
        keys = np.asarray(keys, np.int64)
        fill = self.n + 1 if missing == "default" else self.n
        flat = keys.reshape(-1).tolist()
        found = np.array([k in self.slot for k in flat], bool).reshape(keys.shape)
        slots = np.array([self.slot.get(k, fill) for k in flat], np.int64).reshape(keys.shape)
        return slots, found

    def absent(self, rng, n):
        """n keys the table lacks."""
        out = []
        while len(out) < n:
            k = int(rng.integers(INT64_MIN, INT64_MAX, dtype=np.int64, endpoint=True))
            if k not in self.slot:
                out.append(k)
        return np.array(out, np.int64)

    def lookup(self, rng, shape, missing_fraction):
        """Random lookup keys of `shape`: present ones (repeats allowed), and absent ones with
        probability missing_fraction each."""
        n = int(np.prod(shape, dtype=np.int64))
        keys = np.array(list(self.slot), np.int64)
        out = keys[rng.integers(0, len(keys), size=n)]
        mask = rng.random(n) < missing_fraction
        out = np.where(mask, self.absent(rng, max(n, 1))[:n], out)
        return out.astype(np.int64).reshape(shape)
