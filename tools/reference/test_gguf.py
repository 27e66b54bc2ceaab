"""GGUF reader/writer: round trips, hand-built bytes, and every malformed-input error."""

import os
import struct
import sys
import tempfile
import unittest
import warnings

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from tools.reference import gguf  # noqa: E402
from tools.reference.gguf import GGUFError, GGUFReader, GGUFWriter  # noqa: E402


def _s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


class TempDirCase(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def write_bytes(self, name, data):
        p = self.path(name)
        with open(p, "wb") as f:
            f.write(data)
        return p


class HandBuiltFileTest(TempDirCase):
    """A file assembled byte by byte here (not by the writer) reads back correctly."""

    def test_minimal_file(self):
        head = struct.pack("<IIQQ", 0x46554747, 3, 2, 2)
        head += _s("general.name") + struct.pack("<I", 8) + _s("tiny")
        head += _s("k.arr") + struct.pack("<IIQ", 9, 5, 3) + struct.pack("<3i", -1, 0, 7)
        head += _s("a") + struct.pack("<IQ", 1, 3) + struct.pack("<IQ", 0, 0)       # F32 [3]
        head += _s("b") + struct.pack("<IQQ", 2, 2, 1) + struct.pack("<IQ", 1, 32)  # F16 [2, 1]
        pad = (-len(head)) % 32
        data = struct.pack("<3f", 1.5, -2.0, 0.25) + bytes(32 - 12) + struct.pack("<2e", 3.0, -0.5)
        p = self.write_bytes("m.gguf", head + bytes(pad) + data)
        r = GGUFReader(p)
        self.assertEqual(r.version, 3)
        self.assertEqual(r.metadata["general.name"], "tiny")
        self.assertEqual(r.metadata["k.arr"].tolist(), [-1, 0, 7])
        self.assertEqual(r.data_offset, len(head) + pad)
        self.assertEqual(r.tensors["a"].dims, (3,))
        self.assertEqual(r.tensors["b"].offset, len(head) + pad + 32)
        np.testing.assert_array_equal(r.tensor("a"), [1.5, -2.0, 0.25])
        np.testing.assert_array_equal(r.tensor("b"), [[3.0, -0.5]])   # numpy shape (1, 2)


class RoundTripTest(TempDirCase):
    def test_all_value_types_round_trip(self):
        w = GGUFWriter()
        vals = [
            ("u8", 200, gguf.T_U8), ("i8", -100, gguf.T_I8), ("u16", 60000, gguf.T_U16),
            ("i16", -30000, gguf.T_I16), ("u32", 4000000000, gguf.T_U32), ("i32", -2000000000, gguf.T_I32),
            ("f32", 0.5, gguf.T_F32), ("bool", True, gguf.T_BOOL), ("str", "héllo ｜", gguf.T_STRING),
            ("u64", 2 ** 63 + 5, gguf.T_U64), ("i64", -2 ** 62, gguf.T_I64), ("f64", 1e-300, gguf.T_F64),
        ]
        for k, v, t in vals:
            w.add_kv(k, v, t)
        w.add_kv("arr_i32", [1, -2, 3], ("array", gguf.T_I32))
        w.add_kv("arr_f32", [1.0, 2.5], ("array", gguf.T_F32))
        w.add_kv("arr_f64", [1.0, 2.5], ("array", gguf.T_F64))
        w.add_kv("arr_bool", [True, False, True], ("array", gguf.T_BOOL))
        w.add_kv("arr_str", ["a", "bc", ""], ("array", gguf.T_STRING))
        w.add_kv("arr_nested", [[1, 2], [3]], ("array", gguf.T_ARRAY))
        w.add_kv("arr_u64", [2 ** 40], ("array", gguf.T_U64))
        p = self.path("kv.gguf")
        w.write(p)
        r = GGUFReader(p)
        for k, v, t in vals:
            self.assertEqual(r.metadata_types[k], t, k)
            self.assertEqual(r.metadata[k], v, k)
        self.assertEqual(r.metadata["arr_i32"].tolist(), [1, -2, 3])
        self.assertEqual(r.metadata["arr_i32"].item_type, gguf.T_I32)
        self.assertEqual(r.metadata["arr_f32"].tolist(), [1.0, 2.5])
        self.assertEqual(r.metadata["arr_f64"].item_type, gguf.T_F64)
        self.assertEqual(r.metadata["arr_bool"].tolist(), [True, False, True])
        self.assertEqual(r.metadata["arr_str"].tolist(), ["a", "bc", ""])
        self.assertEqual(r.metadata["arr_nested"].tolist(), [[1, 2], [3]])
        self.assertEqual(r.metadata["arr_u64"].tolist(), [2 ** 40])
        self.assertEqual(r.alignment, 32)

    def test_tensors_round_trip_with_custom_alignment(self):
        rng = np.random.default_rng(0)
        a = rng.standard_normal((3, 5)).astype(np.float32)
        b = rng.standard_normal(7).astype(np.float16)
        c = np.arange(-4, 8, dtype=np.int32).reshape(2, 6)
        q = np.arange(34 * 2, dtype=np.uint8)
        w = GGUFWriter(alignment=64)
        w.add_tensor("a", a, "F32")
        w.add_tensor("b", b, "F16")
        w.add_tensor("c", c, "I32")
        w.add_tensor("q", q, "Q8_0", dims=(64,))
        w.add_tensor("bf", np.array([1.0, -2.0, 3.5]), "BF16")
        p = self.path("t.gguf")
        w.write(p)
        r = GGUFReader(p)
        self.assertEqual(r.alignment, 64)
        self.assertEqual(r.data_offset % 64, 0)
        for name in ("a", "b", "c", "q", "bf"):
            self.assertEqual((r.tensors[name].offset - r.data_offset) % 64, 0, name)
        self.assertEqual(r.tensors["a"].dims, (5, 3))
        self.assertEqual(r.tensors["q"].nbytes, 68)
        np.testing.assert_array_equal(r.tensor("a"), a.astype(np.float64))
        np.testing.assert_array_equal(r.tensor("b"), b.astype(np.float64))
        np.testing.assert_array_equal(r.tensor("c"), c)
        np.testing.assert_array_equal(r.tensor("bf"), [1.0, -2.0, 3.5])
        np.testing.assert_array_equal(np.asarray(r.raw("q")), q)
        np.testing.assert_array_equal(r.rows("a", 1, 2), a[1:3].astype(np.float64))

    def test_tensor_nbytes(self):
        self.assertEqual(gguf.tensor_nbytes(8, (4096, 3)), 4096 // 32 * 34 * 3)
        self.assertEqual(gguf.tensor_nbytes(16, (4096, 2048, 256)), 16 * 66 * 2048 * 256)
        self.assertEqual(gguf.tensor_nbytes(10, (256,)), 84)
        self.assertEqual(gguf.tensor_nbytes(12, (512,)), 288)
        self.assertEqual(gguf.tensor_nbytes(0, (33,)), 132)
        self.assertEqual(gguf.tensor_nbytes(99, (33,)), 0)


class ErrorTest(TempDirCase):
    def _valid(self):
        w = GGUFWriter()
        w.add_kv("x", 1)
        w.add_tensor("t", np.zeros(8, dtype=np.float32), "F32")
        return bytearray(w.to_bytes())

    def assertFails(self, data, fragment):
        p = self.write_bytes("bad.gguf", bytes(data))
        with self.assertRaises(GGUFError) as cm:
            GGUFReader(p)
        self.assertIn(fragment, str(cm.exception))

    def test_bad_magic(self):
        d = self._valid()
        d[0:4] = b"GGML"
        self.assertFails(d, "bad magic")

    def test_bad_version(self):
        d = self._valid()
        d[4:8] = struct.pack("<I", 2)
        self.assertFails(d, "version 2 not supported")

    def test_truncated_everywhere(self):
        d = self._valid()
        hdr_end = 24 + len(_s("x")) + 4 + 4 + len(_s("t")) + 4 + 8 + 4 + 8
        for cut in (3, 10, 20, 30, hdr_end - 1):
            self.assertFails(d[:cut], "truncated")

    def test_tensor_beyond_end(self):
        d = self._valid()
        self.assertFails(d[:-1], "extends beyond the file end")

    def test_bad_ndim(self):
        for nd in (0, 9):
            head = struct.pack("<IIQQ", 0x46554747, 3, 1, 0) + _s("t") + struct.pack("<I", nd)
            self.assertFails(head + bytes(200), "ndim %d" % nd)

    def test_unknown_value_type(self):
        head = struct.pack("<IIQQ", 0x46554747, 3, 0, 1) + _s("k") + struct.pack("<I", 13) + bytes(16)
        self.assertFails(head, "unknown value type 13")

    def test_array_nesting_too_deep(self):
        body = b""
        for _ in range(9):
            body += struct.pack("<IQ", 9, 1)
        body += struct.pack("<IQ", 4, 0)
        head = struct.pack("<IIQQ", 0x46554747, 3, 0, 1) + _s("k") + struct.pack("<I", 9) + body
        self.assertFails(head, "deeper than 8")

    def test_duplicate_key(self):
        w = GGUFWriter()
        w.add_kv("k", 1)
        w.add_kv("k", 2)
        self.assertFails(w.to_bytes(), "duplicate metadata key")

    def test_zero_alignment(self):
        w = GGUFWriter()
        w.add_kv("general.alignment", 0, gguf.T_U32)
        self.assertFails(w.to_bytes(), "general.alignment")

    def test_unknown_tensor_type_warns_and_cannot_be_read(self):
        d = self._valid()
        tail = d.rfind(b"t") + 1
        # directory entry: name, ndim u32, dims u64, type u32, offset u64
        type_at = tail + 4 + 8
        d[type_at:type_at + 4] = struct.pack("<I", 39)
        p = self.write_bytes("w.gguf", bytes(d))
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            r = GGUFReader(p)
        self.assertTrue(any("unknown type 39" in str(x.message) for x in ws))
        self.assertEqual(r.tensors["t"].nbytes, 0)
        with self.assertRaises(GGUFError):
            r.tensor("t")

    def test_missing_tensor_and_bad_rows(self):
        p = self.write_bytes("ok.gguf", bytes(self._valid()))
        r = GGUFReader(p)
        with self.assertRaisesRegex(GGUFError, "not found"):
            r.tensor("nope")
        with self.assertRaisesRegex(GGUFError, "out of range"):
            r.rows("t", 0, 2)

    def test_missing_file(self):
        with self.assertRaisesRegex(GGUFError, "cannot map"):
            GGUFReader(self.path("absent.gguf"))

    def test_writer_rejects_bad_sizes(self):
        w = GGUFWriter()
        with self.assertRaisesRegex(GGUFError, "needs 34"):
            w.add_tensor("q", np.zeros(10, dtype=np.uint8), "Q8_0", dims=(32,))
        with self.assertRaisesRegex(GGUFError, "unknown tensor type"):
            w.add_tensor("q", np.zeros(10, dtype=np.uint8), "MXFP4", dims=(32,))


if __name__ == "__main__":
    unittest.main()
