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
    (freq_scale, low, high) for the YaRN frequency blend; no magnitude scaling.
    f32_angles: False computes theta = pos * base^(-2k/n_rot) (blended) in float64; True
    follows the CPU reference of spec §3.4.3 bit for bit: theta_ext(0) = f32(pos),
    theta_ext(k+1) = theta_ext(k) * f32(base^(-2/n_rot)), the YaRN blend in f32, and cos/sin of
    the f32 angle rounded to f32 (ds4's cosf/sinf are within one f32 ulp of that). At
    position p the two differ by about p * 1e-7 radians: enough to flip FP4/FP8/f16
    roundings of rotated values late in a long prompt, so parity runs use True."""

    def __init__(self, n_rot, base, yarn=None, f32_angles=False):
        self.n_rot = n_rot
        self.base = base
        self.yarn = yarn
        self.f32_angles = f32_angles
        k = np.arange(n_rot // 2, dtype=np.float64)
        self.inv_freq = base ** (-2.0 * k / n_rot)
        if yarn is not None:
            freq_scale, low, high = yarn
            ramp = 1.0 - np.clip((k - low) / max(0.001, high - low), 0.0, 1.0)
            # theta = theta_ext*freq_scale*(1-ramp) + theta_ext*ramp
            self.inv_freq = self.inv_freq * (freq_scale * (1.0 - ramp) + ramp)

    def angles(self, pos):
        """theta_k(pos) for k < n_rot/2 (float64 values; f32 values in f32_angles mode)."""
        if not self.f32_angles:
            return float(pos) * self.inv_freq
        f = np.float32
        scale = f(np.float64(f(self.base)) ** np.float64(f(-2.0) / f(self.n_rot)))
        if self.yarn is not None:
            freq_scale, low, high = (f(v) for v in self.yarn)
            den = max(f(0.001), f(high - low))
        else:
            freq_scale = f(1.0)
        out = np.empty(self.n_rot // 2)
        theta_ext = f(pos)
        for k in range(self.n_rot // 2):
            theta = f(freq_scale * theta_ext)
            if self.yarn is not None:
                ramp = f(1.0) - min(f(1.0), max(f(0.0), f((f(k) - low) / den)))
                theta = f(theta * f(f(1.0) - ramp)) + f(theta_ext * ramp)
            out[k] = theta
            theta_ext = f(theta_ext * scale)
        return out

    def cos_sin(self, pos):
        """(cos, sin) of angles(pos); rounded to f32 in f32_angles mode."""
        th = self.angles(pos)
        c, s = np.cos(th), np.sin(th)
        if self.f32_angles:
            c, s = c.astype(np.float32).astype(np.float64), s.astype(np.float32).astype(np.float64)
        return c, s

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
    c, s = rope.cos_sin(pos)
    if inverse:
        s = -s
    t = x[..., x.shape[-1] - n:]
    t0 = t[..., 0::2].copy()
    t1 = t[..., 1::2].copy()
    t[..., 0::2] = t0 * c - t1 * s
    t[..., 1::2] = t0 * s + t1 * c
    return x
