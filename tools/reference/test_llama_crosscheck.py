"""Tests of llama_crosscheck.py's CPU check: AMX read from the flags line of /proc/cpuinfo."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from tools.reference.llama_crosscheck import cpu_has_amx  # noqa: E402


class CpuHasAmxTest(unittest.TestCase):
    def check(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(text)
        try:
            return cpu_has_amx(f.name)
        finally:
            os.unlink(f.name)

    def test_flags(self):
        self.assertTrue(self.check("processor\t: 0\nflags\t\t: fpu sse2 avx512f amx_bf16 amx_int8 amx_tile\n"))
        self.assertFalse(self.check("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\n"))
        # amx_int8 outside the flags line (e.g. in a model name) does not count
        self.assertFalse(self.check("model name\t: amx_int8 tester\nflags\t\t: fpu avx2\n"))

    def test_unreadable_file_means_no_amx(self):
        self.assertFalse(cpu_has_amx("/nonexistent/cpuinfo"))


if __name__ == "__main__":
    unittest.main()
