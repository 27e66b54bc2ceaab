"""Dequantizers on hand-made blocks with hand-computed values, the IQ2_XXS tables, and the
activation-quantization simulations (including equality with the integer dot products the
engine uses, computed here with scalar loops straight from the spec formulas)."""

import os
import struct
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from tools.reference import quants  # noqa: E402
from tools.reference.gguf import GGUFError, TYPE_IDS  # noqa: E402
from tools.reference.iq2xxs_grid import IQ2XXS_GRID  # noqa: E402


def deq(raw, type_name, n):
    return quants.dequantize(np.frombuffer(bytes(raw), dtype=np.uint8), TYPE_IDS[type_name], n)


def f16b(v):
    return struct.pack("<e", v)


class FloatTypesTest(unittest.TestCase):
    def test_f32_f16_bf16(self):
        np.testing.assert_array_equal(deq(struct.pack("<3f", 1.5, -0.0, 1e-30), "F32", 3),
                                      [1.5, -0.0, np.float32(1e-30)])
        raw = struct.pack("<4H", 0x3C00, 0xC000, 0x0001, 0x7BFF)
        np.testing.assert_array_equal(deq(raw, "F16", 4), [1.0, -2.0, 2.0 ** -24, 65504.0])
        raw = struct.pack("<4H", 0x3F80, 0xC040, 0x3F00, 0x0000)
        np.testing.assert_array_equal(deq(raw, "BF16", 4), [1.0, -3.0, 0.5, 0.0])

    def test_bf16_encoder_rounds_to_nearest_even(self):
        # 1 + 2^-8 is the midpoint between bf16 1.0 and 1.0078125 -> even (1.0).
        bits = quants.f32_to_bf16_bits(np.array([1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -2.0]))
        self.assertEqual(bits.tolist(), [0x3F80, 0x3F82, 0xC000])


class Q8_0Test(unittest.TestCase):
    def test_hand_block(self):
        q = [-128, -1, 0, 1, 127] + [3] * 27
        raw = f16b(0.5) + struct.pack("<32b", *q)
        expect = [-64.0, -0.5, 0.0, 0.5, 63.5] + [1.5] * 27
        np.testing.assert_array_equal(deq(raw, "Q8_0", 32), expect)

    def test_quantizer_round_trip(self):
        x = np.array([127.0, -63.5, 0.5, -0.5, 1.49] + [0.0] * 27)
        y = deq(quants.quantize_q8_0(x), "Q8_0", 32)
        # d = 1: 63.5 and 0.5 are ties, rounded away from zero by the file quantizer.
        np.testing.assert_array_equal(y[:5], [127.0, -64.0, 1.0, -1.0, 1.0])

    def test_short_buffer_error(self):
        with self.assertRaisesRegex(GGUFError, "need 34 bytes"):
            deq(bytes(33), "Q8_0", 32)
        with self.assertRaisesRegex(GGUFError, "multiple of 32"):
            quants.dequant_q8_0(bytes(34), 31)


class Q2_KTest(unittest.TestCase):
    def test_hand_block(self):
        scales = [0] * 16
        scales[0] = 0x21      # sc 1, mn 2
        scales[2] = 0x35      # sc 5, mn 3
        scales[4] = 0x0F      # sc 15, mn 0
        scales[6] = 0xF1      # sc 1, mn 15
        scales[8] = 0x22      # sc 2, mn 2
        scales[12] = 0x47     # sc 7, mn 4
        scales[14] = 0x19     # sc 9, mn 1
        qs = [0] * 64
        qs[0] = 0xE4          # k=0, l=0: codes 0,1,2,3 for s = 0..3 -> elements 0, 32, 64, 96
        qs[32 + 5] = 0x1B     # k=1, l=5: codes 3,2,1,0 -> elements 133, 165, 197, 229
        raw = bytes(scales) + bytes(qs) + f16b(0.5) + f16b(0.25)
        mn_of_sub = [2, 0, 3, 0, 0, 0, 15, 0, 2, 0, 0, 0, 4, 0, 1, 0]
        expect = np.repeat([-0.25 * m for m in mn_of_sub], 16)
        expect[0] = -0.5                   # 0.5*1*0 - 0.25*2
        expect[32] = 1.75                  # 0.5*5*1 - 0.25*3
        expect[64] = 15.0                  # 0.5*15*2
        expect[96] = -2.25                 # 0.5*1*3 - 0.25*15
        expect[133] = 2.5                  # 0.5*2*3 - 0.25*2
        expect[165] = 0.0                  # sub 10: sc 0, mn 0
        expect[197] = 2.5                  # 0.5*7*1 - 0.25*4
        expect[229] = -0.25                # 0.5*9*0 - 0.25*1
        np.testing.assert_array_equal(deq(raw, "Q2_K", 256), expect)


class Q4_KTest(unittest.TestCase):
    def test_hand_block(self):
        sc = [0] * 12
        sc[0] = 0x81          # sc0 = 1, high bits of sc4 = 2
        sc[1] = 63            # sc1 = 63
        sc[4] = 0x42          # mn0 = 2, high bits of mn4 = 1
        sc[8] = 0x35          # sc4 low nibble 5, mn4 low nibble 3 -> sc4 = 37, mn4 = 19
        qs = [0] * 128
        qs[0] = 0x3A          # element 0: q 10 (sub 0), element 32: q 3 (sub 1)
        qs[64] = 0xF7         # element 128: q 7 (sub 4), element 160: q 15 (sub 5)
        raw = f16b(0.5) + f16b(0.25) + bytes(sc) + bytes(qs)
        expect = np.zeros(256)
        expect[0:32] = -0.5                # sub 0: -0.25*2
        expect[128:160] = -4.75            # sub 4: -0.25*19
        expect[0] = 4.5                    # 0.5*1*10 - 0.5
        expect[32] = 94.5                  # 0.5*63*3
        expect[128] = 124.75               # 0.5*37*7 - 4.75
        expect[160] = 0.0                  # sub 5: sc 0
        np.testing.assert_array_equal(deq(raw, "Q4_K", 256), expect)

    def test_scale_min_unpacking(self):
        s = np.array([[0x81, 63, 0, 0, 0x42, 0, 0, 0, 0x35, 0, 0, 0]], dtype=np.uint8)
        sc, mn = quants.q4_k_scale_min(s)
        self.assertEqual(sc.tolist(), [[1, 63, 0, 0, 37, 0, 0, 0]])
        self.assertEqual(mn.tolist(), [[2, 0, 0, 0, 19, 0, 0, 0]])


# The same codebook in llama.cpp's other representation (`kgrid_2bit_256`: 2 bits per
# element, codes 0/1/2 for magnitudes 8/25/43), transcribed separately: a check on the
# transcription of IQ2XXS_GRID.
KGRID_2BIT_256 = [
    0, 2, 5, 8, 10, 17, 20, 32, 34, 40, 42, 65, 68, 80, 88, 97,
    100, 128, 130, 138, 162, 257, 260, 272, 277, 320, 388, 408, 512, 514, 546, 642,
    1025, 1028, 1040, 1057, 1060, 1088, 1090, 1096, 1120, 1153, 1156, 1168, 1188, 1280, 1282, 1288,
    1312, 1350, 1385, 1408, 1425, 1545, 1552, 1600, 1668, 1700, 2048, 2053, 2056, 2068, 2088, 2113,
    2116, 2128, 2130, 2184, 2308, 2368, 2562, 2580, 4097, 4100, 4112, 4129, 4160, 4192, 4228, 4240,
    4245, 4352, 4360, 4384, 4432, 4442, 4480, 4644, 4677, 5120, 5128, 5152, 5157, 5193, 5248, 5400,
    5474, 5632, 5654, 6145, 6148, 6160, 6208, 6273, 6400, 6405, 6560, 6737, 8192, 8194, 8202, 8260,
    8289, 8320, 8322, 8489, 8520, 8704, 8706, 9217, 9220, 9232, 9280, 9302, 9472, 9537, 9572, 9872,
    10248, 10272, 10388, 10820, 16385, 16388, 16400, 16408, 16417, 16420, 16448, 16456, 16470, 16480, 16513, 16516,
    16528, 16640, 16672, 16737, 16768, 16773, 16897, 16912, 16968, 16982, 17000, 17408, 17416, 17440, 17536, 17561,
    17682, 17700, 17920, 18433, 18436, 18448, 18496, 18501, 18688, 18776, 18785, 18818, 19013, 19088, 20480, 20488,
    20497, 20505, 20512, 20608, 20616, 20740, 20802, 20900, 21137, 21648, 21650, 21770, 22017, 22100, 22528, 22545,
    22553, 22628, 22848, 23048, 24580, 24592, 24640, 24680, 24832, 24917, 25112, 25184, 25600, 25605, 25872, 25874,
    25988, 26690, 32768, 32770, 32778, 32833, 32898, 33028, 33048, 33088, 33297, 33793, 33796, 33808, 33813, 33856,
    33888, 34048, 34118, 34196, 34313, 34368, 34400, 34818, 35076, 35345, 36868, 36880, 36900, 36928, 37025, 37142,
    37248, 37445, 37888, 37922, 37956, 38225, 39041, 39200, 40962, 41040, 41093, 41225, 41472, 42008, 43088, 43268,
]


class IQ2_XXSTest(unittest.TestCase):
    def test_grid_matches_index_form(self):
        code = {8: 0, 25: 1, 43: 2}
        packed = [sum(code[(g >> (8 * j)) & 0xFF] << (2 * j) for j in range(8)) for g in IQ2XXS_GRID]
        self.assertEqual(packed, KGRID_2BIT_256)

    def test_grid_table(self):
        self.assertEqual(len(IQ2XXS_GRID), 256)
        self.assertEqual(len(set(IQ2XXS_GRID)), 256)
        self.assertEqual(list(IQ2XXS_GRID), sorted(IQ2XXS_GRID))
        self.assertEqual(IQ2XXS_GRID[0], 0x0808080808080808)
        self.assertEqual(IQ2XXS_GRID[255], 0x2b2b2b1908081908)
        self.assertTrue(set(np.unique(quants.IQ2XXS_GRID_BYTES)) <= {8.0, 25.0, 43.0})

    def test_ksigns_table(self):
        k = quants.KSIGNS_IQ2XS.tolist()
        self.assertEqual(k[:16], [0, 129, 130, 3, 132, 5, 6, 135, 136, 9, 10, 139, 12, 141, 142, 15])
        self.assertEqual(k[112:], [240, 113, 114, 243, 116, 245, 246, 119, 120, 249, 250, 123, 252, 125, 126, 255])

    def test_hand_block(self):
        a1 = (5 << 28) | 1 | (0 << 7) | (3 << 14) | (127 << 21)
        sub0 = bytes([0, 1, 255, 2]) + struct.pack("<I", a1)
        raw = f16b(0.5) + sub0 + bytes(56)
        s = 0.5 * 5.5 * 0.25                       # 0.6875
        g0 = [-8, 8, 8, 8, 8, 8, 8, -8]            # grid[0], ksigns[1] = 0b10000001
        g1 = [43, 8, 8, 8, 8, 8, 8, 8]             # grid[1], no signs
        g2 = [-8, -25, 8, 8, 25, 43, 43, 43]       # grid[255], ksigns[3] = 0b11
        g3 = [-25, -25, -8, -8, -8, -8, -8, -8]    # grid[2], ksigns[127] = 0xff
        expect = [s * v for v in g0 + g1 + g2 + g3] + [0.5] * 224  # zero sub-blocks: 0.5*0.5*0.25*8
        np.testing.assert_array_equal(deq(raw, "IQ2_XXS", 256), expect)


class ActivationQuantTest(unittest.TestCase):
    def test_q8_0_hand_block(self):
        x = np.zeros(96)
        x[0:6] = [127.0, 2.5, 3.5, -2.5, 0.49, -127.0]
        x[64:67] = [254.0, 5.0, 7.0]
        d, q = quants.q8_0_activation(x)
        self.assertEqual(d.tolist(), [1.0, 0.0, 2.0])
        self.assertEqual(q[0, :6].tolist(), [127, 2, 4, -2, 0, -127])
        self.assertEqual(q[1].tolist(), [0] * 32)
        self.assertEqual(q[2, :3].tolist(), [127, 2, 4])          # 2.5 -> 2, 3.5 -> 4 (half even)
        y = quants.q8_0_activation_roundtrip(x)
        self.assertEqual(y[:6].tolist(), [127.0, 2.0, 4.0, -2.0, 0.0, -127.0])

    def test_q8_k_hand_block(self):
        x = np.zeros(512)
        x[0:4] = [-127.0, 2.5, -3.5, 100.0]
        x[256:258] = [64.0, -64.0]               # equal |x|: the first (positive) one is max
        d, q, bsums = quants.q8_k_activation(x)
        self.assertEqual(d[0], 1.0)              # iscale = -127/-127 = 1
        self.assertEqual(q[0, :4].tolist(), [-127, 2, -4, 100])
        self.assertEqual(bsums[0, 0], -29)
        self.assertEqual(q[1, :2].tolist(), [-127, 127])
        self.assertAlmostEqual(float(d[1]), -64.0 / 127.0, places=6)
        d0, q0, b0 = quants.q8_k_activation(np.zeros(256))
        self.assertEqual((d0[0], int(np.abs(q0).sum()), int(np.abs(b0).sum())), (0.0, 0, 0))

    def test_bad_lengths(self):
        with self.assertRaisesRegex(GGUFError, "multiple of 32"):
            quants.q8_0_activation(np.zeros(33))
        with self.assertRaisesRegex(GGUFError, "multiple of 256"):
            quants.q8_k_activation(np.zeros(128))


class IntegerDotEquivalenceTest(unittest.TestCase):
    """dequant(W) @ roundtrip(x) equals the engine's integer dot formulas (spec §3.1, §5)."""

    def setUp(self):
        self.rng = np.random.default_rng(7)

    def _row(self, nbytes, d_at, d_val, extra=()):
        raw = bytearray(self.rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes())
        raw[d_at:d_at + 2] = f16b(d_val)
        for at, v in extra:
            raw[at:at + 2] = f16b(v)
        return bytes(raw)

    def test_q8_0_dot(self):
        x = self.rng.standard_normal(64)
        raw = b"".join(self._row(34, 0, 0.01 * (i + 1)) for i in range(2))
        dx, qx = quants.q8_0_activation(x)
        ref = 0.0
        for b in range(2):
            wd = struct.unpack_from("<e", raw, 34 * b)[0]
            wq = struct.unpack_from("<32b", raw, 34 * b + 2)
            ref += wd * float(dx[b]) * sum(a * int(c) for a, c in zip(wq, qx[b]))
        got = deq(raw, "Q8_0", 64) @ quants.q8_0_activation_roundtrip(x)
        self.assertAlmostEqual(got, ref, delta=1e-12 * max(1.0, abs(ref)))

    def test_iq2_xxs_dot(self):
        x = self.rng.standard_normal(256)
        raw = self._row(66, 0, 0.003)
        dy, qy, _ = quants.q8_k_activation(x)
        d = struct.unpack_from("<e", raw, 0)[0]
        total = 0
        for ib in range(8):
            a0 = raw[2 + 8 * ib:2 + 8 * ib + 4]
            a1 = struct.unpack_from("<I", raw, 2 + 8 * ib + 4)[0]
            sub = 0
            for k in range(4):
                grid = IQ2XXS_GRID[a0[k]]
                signs = quants.KSIGNS_IQ2XS[(a1 >> (7 * k)) & 127]
                for j in range(8):
                    g = (grid >> (8 * j)) & 0xFF
                    sgn = -1 if (signs >> j) & 1 else 1
                    sub += sgn * g * int(qy[0, 32 * ib + 8 * k + j])
            total += (2 * (a1 >> 28) + 1) * sub
        ref = 0.125 * d * float(dy[0]) * total
        got = deq(raw, "IQ2_XXS", 256) @ quants.q8_k_activation_roundtrip(x)
        self.assertAlmostEqual(got, ref, delta=1e-12 * max(1.0, abs(ref)))

    def test_q2_k_dot_uses_bsums(self):
        x = self.rng.standard_normal(256)
        raw = self._row(84, 80, 0.01, extra=((82, 0.02),))
        dy, qy, bsums = quants.q8_k_activation(x)
        d, dmin = struct.unpack_from("<2e", raw, 80)
        isum = 0
        msum = 0
        for i in range(256):
            k, s, l = i // 128, (i % 128) // 32, i % 32
            q = (raw[16 + 32 * k + l] >> (2 * s)) & 3
            isum += (raw[i // 16] & 15) * q * int(qy[0, i])
        for j in range(16):
            msum += (raw[j] >> 4) * int(bsums[0, j])
        ref = float(dy[0]) * (d * isum - dmin * msum)
        got = deq(raw, "Q2_K", 256) @ quants.q8_k_activation_roundtrip(x)
        self.assertAlmostEqual(got, ref, delta=1e-12 * max(1.0, abs(ref)))

    def test_q4_k_dot(self):
        x = self.rng.standard_normal(256)
        raw = self._row(144, 0, 0.01, extra=((2, 0.005),))
        dy, qy, bsums = quants.q8_k_activation(x)
        d, dmin = struct.unpack_from("<2e", raw, 0)
        sc, mn = quants.q4_k_scale_min(np.frombuffer(raw[4:16], dtype=np.uint8)[None, :])
        isum = 0
        msum = 0
        for i in range(256):
            c, hi, l = i // 64, (i % 64) // 32, i % 32
            byte = raw[16 + 32 * c + l]
            q = (byte >> 4) if hi else (byte & 15)
            isum += int(sc[0, i // 32]) * q * int(qy[0, i])
        for j in range(8):
            msum += int(mn[0, j]) * (int(bsums[0, 2 * j]) + int(bsums[0, 2 * j + 1]))
        ref = float(dy[0]) * (d * isum - dmin * msum)
        got = deq(raw, "Q4_K", 256) @ quants.q8_k_activation_roundtrip(x)
        self.assertAlmostEqual(got, ref, delta=1e-12 * max(1.0, abs(ref)))


class DispatchTest(unittest.TestCase):
    def test_unsupported_type(self):
        with self.assertRaisesRegex(GGUFError, "no dequantizer for type Q6_K"):
            quants.dequantize(bytes(210), TYPE_IDS["Q6_K"], 256)
        with self.assertRaisesRegex(GGUFError, "unknown ggml type 39"):
            quants.dequantize(bytes(17), 39, 32)


if __name__ == "__main__":
    unittest.main()
