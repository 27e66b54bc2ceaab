"""Scalar/vector primitives of the forward pass in float64 (spec conventions, §3.1, §3.3,
§3.4.3). Everything works on the last axis and accepts leading batch axes."""

import math

import numpy as np


def rms_norm(x, eps, weight=None):
    """x / sqrt(mean(x^2) + eps) [* weight] over the last axis."""
    x = np.asarray(x, dtype=np.float64)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * weight if weight is not None else y


def sigmoid(z):
    """1/(1+exp(-z)), overflow-free."""
    return np.exp(-np.logaddexp(0.0, -np.asarray(z, dtype=np.float64)))


def silu(z):
    """z * sigmoid(z)."""
    z = np.asarray(z, dtype=np.float64)
    return z * sigmoid(z)


def softplus(z):
    """softplus as ds4 defines it (spec conventions): z if z > 20, exp(z) if z < -20,
    log1p(exp(z)) otherwise."""
    z = np.asarray(z, dtype=np.float64)
    mid = np.log1p(np.exp(np.clip(z, -20.0, 20.0)))
    return np.where(z > 20.0, z, np.where(z < -20.0, np.exp(np.minimum(z, 0.0)), mid))


def softmax(z, axis=-1):
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# ---------------------------------------------------------------------------------------
# Hyper-connections (spec §3.3)

def sinkhorn(logits, iters, eps):
    """Sinkhorn normalisation of an [n, n] logit matrix L[r][c] (spec §3.3 step 4).

    Iteration 1: row softmax + eps, then column normalisation; iterations 2..iters: row then
    column normalisation, each dividing by (sum + eps). Returns M[r][c]."""
    m = softmax(logits, axis=1) + eps
    m = m / (m.sum(axis=0, keepdims=True) + eps)
    for _ in range(iters - 1):
        m = m / (m.sum(axis=1, keepdims=True) + eps)
        m = m / (m.sum(axis=0, keepdims=True) + eps)
    return m


def hc_split(mix, scale, base, n_hc, iters, eps):
    """Split the HC control vector (spec §3.3 step 3-4).

    mix: [2n + n^2] projected control values; scale: [3]; base: [2n + n^2].
    Returns (pre [n], post [n], comb [n, n] with comb[r][c] = M[r][c])."""
    n = n_hc
    pre = sigmoid(mix[:n] * scale[0] + base[:n]) + eps
    post = 2.0 * sigmoid(mix[n:2 * n] * scale[1] + base[n:2 * n])
    logits = (mix[2 * n:] * scale[2] + base[2 * n:]).reshape(n, n)
    return pre, post, sinkhorn(logits, iters, eps)


def hc_post(y, state, post, comb):
    """X'[c] = post[c] * y + sum_r M[r][c] * X[r]  (spec §3.3). state: [n, E], y: [E]."""
    return post[:, None] * y[None, :] + comb.T @ state


# ---------------------------------------------------------------------------------------
# RoPE (spec §1.4, §3.4.3)

class RopeParams:
    """Tail-RoPE parameters of one layer.

    n_rot: rotated dims (even); base: frequency base; yarn: None (plain RoPE) or
    (freq_scale, low, high) for the YaRN frequency blend; no magnitude scaling."""

    def __init__(self, n_rot, base, yarn=None):
        self.n_rot = n_rot
        self.base = base
        self.yarn = yarn
        k = np.arange(n_rot // 2, dtype=np.float64)
        self.inv_freq = base ** (-2.0 * k / n_rot)
        if yarn is not None:
            freq_scale, low, high = yarn
            ramp = 1.0 - np.clip((k - low) / max(0.001, high - low), 0.0, 1.0)
            # theta = theta_ext*freq_scale*(1-ramp) + theta_ext*ramp
            self.inv_freq = self.inv_freq * (freq_scale * (1.0 - ramp) + ramp)

    def angles(self, pos):
        return float(pos) * self.inv_freq

    def __repr__(self):
        return "RopeParams(n_rot=%d, base=%g, yarn=%r)" % (self.n_rot, self.base, self.yarn)


def yarn_corr_dims(n_rot, base, orig_ctx, beta_fast, beta_slow):
    """(low, high) YaRN correction dims (spec §1.4):
    cd(beta) = n_rot * ln(orig_ctx / (beta*2*pi)) / (2 ln base);
    low = max(0, floor(cd(beta_fast))), high = min(n_rot-1, ceil(cd(beta_slow)))."""
    def cd(beta):
        return n_rot * math.log(orig_ctx / (beta * 2.0 * math.pi)) / (2.0 * math.log(base))
    return max(0, math.floor(cd(beta_fast))), min(n_rot - 1, math.ceil(cd(beta_slow)))


def rope_tail(x, pos, rope, inverse=False):
    """Rotate the last rope.n_rot dims of x (adjacent pairs (2k, 2k+1)) by angle
    pos*inv_freq[k]; inverse=True rotates by the negative angle (spec §3.4.3)."""
    x = np.array(x, dtype=np.float64, copy=True)
    n = rope.n_rot
    th = rope.angles(pos)
    c, s = np.cos(th), np.sin(th)
    if inverse:
        s = -s
    t = x[..., x.shape[-1] - n:]
    t0 = t[..., 0::2].copy()
    t1 = t[..., 1::2].copy()
    t[..., 0::2] = t0 * c - t1 * s
    t[..., 1::2] = t0 * s + t1 * c
    return x
