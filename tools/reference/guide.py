"""Near-tie resolution for parity runs ("shadowing" another implementation).

The forward pass has discontinuous steps: FP8 / FP4 / f16 roundings of cached rows and
indexer queries, the indexer and router top-k selections, the greedy argmax. When an f32
implementation and this float64 reference compute a value that lies within rounding noise of
such a step's boundary, they may legitimately land on different sides of it (a 4e-6
relative difference flips an FP4 code by a whole step), and from then on the two runs
follow different trajectories, so no per-position comparison is meaningful any more.

A Guide holds the other implementation's recorded results (a trace {pos: {name: array}}
with the reference's trace names) and lets the Session adopt them exactly when they are a
near-tie for the reference:

* quantized(pos, name, y, fn, value): `value = fn(y)` is the reference's rounding of the
  pre-rounding vector y. The other result c is adopted when c == fn(y + d) for the nudge
  d = clip(c - y, -delta, delta), delta = eps * max|y|: c is the rounding of a point within
  eps (relative to the vector's scale, max-norm) of the reference's y. The event records the
  smallest such distance (bisection on the clip bound), relative to max|y|.
* selection(pos, name, score, chosen): the other top-k set C is adopted when it is a top-k
  of score up to delta = eps * max|score|: min(score[C]) >= max(score[not C]) - delta.
* token(step, logits, chosen, other): the other greedy token is adopted when its logit is
  within delta = eps * max|logits| of the maximum.

Anything else is left as the reference computed it, so a real difference still diverges and
is reported by the comparison.

With force=True the guide also teacher-forces: after the reference records an intermediate
(Session._put) it continues with the other implementation's value of that name. Every
recorded value is then the reference's computation of one step from the other run's
inputs, so errors cannot accumulate or cascade: this checks each component in isolation
even where tiny input differences flip Q8_0/Q8_K activation codes inside a matrix product
(quantized models), which near-tie resolution cannot reach. Every adoption is recorded in `events` with the relative
distance to the tie that it needed (bisection for roundings), so reports can show that the
adopted differences are at rounding-noise level.
"""

import numpy as np


class Guide:
    def __init__(self, trace, eps, force=False):
        if not eps > 0:
            raise ValueError("guide eps must be > 0, got %r" % (eps,))
        self.trace = trace
        self.eps = float(eps)
        self.force = bool(force)
        self.events = []    # dicts: pos, name, kind, need (relative distance to the tie)
        self.refused = []   # (pos, name, kind): differences the guide could not explain

    def _other(self, pos, name):
        rec = self.trace.get(pos) if isinstance(self.trace, dict) else (
            self.trace[pos] if pos < len(self.trace) else None)
        if rec is None or name not in rec:
            return None
        return rec[name]

    def forced(self, pos, name, value):
        """The other implementation's `name` at `pos` in value's dtype and shape (value
        itself when the other run has no such entry or a different size)."""
        c = self._other(pos, name)
        if c is None or np.size(c) != np.size(value):
            return value
        return np.asarray(c, dtype=np.asarray(value).dtype).reshape(np.shape(value))

    def quantized(self, pos, name, y, fn, value):
        c = self._other(pos, name)
        if c is None:
            return value
        c = np.asarray(c, dtype=np.float64).reshape(np.shape(value))
        if np.array_equal(c, value):
            return value
        scale = float(np.max(np.abs(y))) if np.size(y) else 0.0
        delta = self.eps * scale
        step = np.clip(c - y, -delta, delta)
        if delta == 0.0 or not np.array_equal(fn(y + step), c):
            self.refused.append((pos, name, "rounding"))
            return value
        lo, hi = 0.0, delta   # smallest nudge cap (L-inf distance) that still gives c
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            if np.array_equal(fn(y + np.clip(c - y, -mid, mid)), c):
                hi = mid
            else:
                lo = mid
        self.events.append({"pos": pos, "name": name, "kind": "rounding", "need": hi / scale,
                            "changed": int(np.sum(c != value))})
        return c

    def selection(self, pos, name, score, chosen):
        c = self._other(pos, name)
        if c is None:
            return chosen
        c = np.asarray(c, dtype=np.int64).reshape(-1)
        if sorted(c.tolist()) == sorted(np.asarray(chosen).tolist()):
            return c    # the same set; the other run's order (it only orders sums)
        score = np.asarray(score, dtype=np.float64)
        n = score.shape[0]
        if len(c) != len(chosen) or np.any(c < 0) or np.any(c >= n) or len(set(c.tolist())) != len(c):
            self.refused.append((pos, name, "selection"))
            return chosen
        mask = np.zeros(n, dtype=bool)
        mask[c] = True
        gap = float(score[~mask].max() - score[mask].min()) if np.any(~mask) else 0.0
        scale = float(np.max(np.abs(score)))
        if gap > self.eps * scale:
            self.refused.append((pos, name, "selection"))
            return chosen
        self.events.append({"pos": pos, "name": name, "kind": "selection",
                            "need": max(gap, 0.0) / scale if scale else 0.0,
                            "changed": int(len(set(c.tolist()) - set(np.asarray(chosen).tolist())))})
        return c

    def token(self, pos, logits, chosen, other):
        if other == chosen:
            return chosen
        scale = float(np.max(np.abs(logits)))
        gap = float(logits[chosen] - logits[other])
        if not 0 <= other < len(logits) or gap > self.eps * scale:
            self.refused.append((pos, "greedy", "token"))
            return chosen
        self.events.append({"pos": pos, "name": "greedy", "kind": "token",
                            "need": gap / scale if scale else 0.0, "changed": 1})
        return other
