"""Small, independent GGUF v3 reader and writer (spec §2.1).

Reader: the file is memory-mapped read-only (numpy.memmap); metadata of every value type
(nested arrays up to depth 8), the tensor directory, `general.alignment`, and per-tensor
byte ranges are parsed and checked. Writer: builds GGUF v3 files from Python values and raw
tensor bytes; used by the self-tests to make tiny models.

Shapes are GGUF order `[d0, d1, ...]` with d0 innermost. `GGUFReader.tensor()` returns the
dequantized tensor as a float64 numpy array with the numpy shape reversed
(`[..., d1, d0]`), so a 2-D weight `[in, out]` becomes `W[out, in]` and `y = W @ x`.

Errors: every malformed input raises `GGUFError` (a ValueError) naming the file, the byte
offset and what was expected.
"""

import struct
import warnings

import numpy as np

GGUF_MAGIC = 0x46554747  # "GGUF" little-endian
GGUF_VERSION = 3
DEFAULT_ALIGNMENT = 32
MAX_ARRAY_DEPTH = 8
MAX_DIMS = 8

# Metadata value types (spec §2.1).
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 = range(13)

_SCALAR_FMT = {
    T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
    T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d",
}
_SCALAR_NP = {
    T_U8: np.uint8, T_I8: np.int8, T_U16: np.uint16, T_I16: np.int16, T_U32: np.uint32,
    T_I32: np.int32, T_F32: np.float32, T_U64: np.uint64, T_I64: np.int64, T_F64: np.float64,
}
VALUE_TYPE_NAMES = {
    T_U8: "u8", T_I8: "i8", T_U16: "u16", T_I16: "i16", T_U32: "u32", T_I32: "i32",
    T_F32: "f32", T_BOOL: "bool", T_STRING: "string", T_ARRAY: "array", T_U64: "u64",
    T_I64: "i64", T_F64: "f64",
}

# ggml tensor types known to the loader (spec §2.1): id -> (name, block elements, block bytes).
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
}
TYPE_IDS = {name: tid for tid, (name, _, _) in GGML_TYPES.items()}


class GGUFError(ValueError):
    """A malformed or unsupported GGUF file or request."""


def align_up(x, a):
    """Smallest multiple of `a` that is >= x."""
    return (x + a - 1) // a * a


def tensor_nbytes(type_id, dims):
    """Bytes of a tensor of GGUF type `type_id` and GGUF shape `dims`.

    Spec §2.1: ceil(elements / block_elems) * block_bytes. Unknown types give 0 (the loader
    only warns; using such a tensor fails later).
    """
    if type_id not in GGML_TYPES:
        return 0
    _, be, bb = GGML_TYPES[type_id]
    n = 1
    for d in dims:
        n *= int(d)
    return (n + be - 1) // be * bb


class TensorInfo:
    """One tensor directory entry.

    name: str; dims: tuple of ints (GGUF order); type_id: ggml type id; type_name: str;
    offset: absolute byte offset in the file; nbytes: byte size (0 for unknown types).
    """

    __slots__ = ("name", "dims", "type_id", "type_name", "offset", "nbytes")

    def __init__(self, name, dims, type_id, offset, nbytes):
        self.name = name
        self.dims = tuple(int(d) for d in dims)
        self.type_id = type_id
        self.type_name = GGML_TYPES[type_id][0] if type_id in GGML_TYPES else "unknown(%d)" % type_id
        self.offset = offset
        self.nbytes = nbytes

    @property
    def n_elements(self):
        n = 1
        for d in self.dims:
            n *= d
        return n

    def __repr__(self):
        return "TensorInfo(%s, %s, %s, off=%d, %d B)" % (
            self.name, list(self.dims), self.type_name, self.offset, self.nbytes)


class _Cursor:
    """Bounds-checked little-endian reader over a byte buffer."""

    def __init__(self, buf, path):
        self.buf = buf
        self.pos = 0
        self.path = path

    def need(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError("%s: truncated at offset %d while reading %s (%d bytes needed, file has %d)"
                            % (self.path, self.pos, what, n, len(self.buf)))

    def scalar(self, t, what):
        fmt = _SCALAR_FMT[t]
        n = struct.calcsize(fmt)
        self.need(n, what)
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return v

    def u32(self, what):
        return self.scalar(T_U32, what)

    def u64(self, what):
        return self.scalar(T_U64, what)

    def string(self, what):
        n = self.u64(what + " length")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError("%s: %s at offset %d is not valid UTF-8" % (self.path, what, self.pos - n))

    def value(self, t, what, depth=0):
        if t in _SCALAR_FMT:
            return self.scalar(t, what)
        if t == T_STRING:
            return self.string(what)
        if t == T_ARRAY:
            if depth >= MAX_ARRAY_DEPTH:
                raise GGUFError("%s: %s at offset %d nests arrays deeper than %d"
                                % (self.path, what, self.pos, MAX_ARRAY_DEPTH))
            it = self.u32(what + " item type")
            n = self.u64(what + " item count")
            if it in _SCALAR_NP and it != T_BOOL:
                dt = np.dtype(_SCALAR_NP[it]).newbyteorder("<")
                self.need(n * dt.itemsize, what)
                arr = np.frombuffer(self.buf, dtype=dt, count=n, offset=self.pos).copy()
                self.pos += n * dt.itemsize
                return GGUFArray(it, arr)
            if it == T_BOOL:
                self.need(n, what)
                arr = np.frombuffer(self.buf, dtype=np.uint8, count=n, offset=self.pos).astype(bool)
                self.pos += n
                return GGUFArray(it, arr)
            if it in (T_STRING, T_ARRAY):
                return GGUFArray(it, [self.value(it, what + "[]", depth + 1) for _ in range(n)])
            raise GGUFError("%s: %s has unknown array item type %d (offset %d)" % (self.path, what, it, self.pos))
        raise GGUFError("%s: %s has unknown value type %d (offset %d)" % (self.path, what, t, self.pos))


class GGUFArray:
    """A metadata array: `item_type` (value type id) and `items` (numpy array for numeric and
    bool items, list for strings and nested arrays)."""

    __slots__ = ("item_type", "items")

    def __init__(self, item_type, items):
        self.item_type = item_type
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def tolist(self):
        if isinstance(self.items, np.ndarray):
            return self.items.tolist()
        return [x.tolist() if isinstance(x, GGUFArray) else x for x in self.items]


class GGUFReader:
    """Memory-mapped GGUF v3 file (spec §2.1).

    Attributes: path; version; alignment; data_offset (absolute start of tensor data);
    metadata: dict key -> value (int/float/bool/str or GGUFArray); metadata_types:
    dict key -> value type id; tensors: dict name -> TensorInfo (file order kept).

    Raises GGUFError for: bad magic, version != 3, truncation anywhere, unknown value
    types, array nesting deeper than 8, ndim outside 1..8, zero alignment, duplicate
    keys or tensor names, tensor bytes beyond the end of the file. Unknown tensor types
    only warn (nbytes = 0), as in ds4.
    """

    def __init__(self, path):
        self.path = str(path)
        try:
            self.mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as e:
            raise GGUFError("%s: cannot map file: %s" % (self.path, e))
        cur = _Cursor(self.mm, self.path)
        magic = cur.u32("magic")
        if magic != GGUF_MAGIC:
            raise GGUFError("%s: bad magic 0x%08x (expected 0x%08x 'GGUF')" % (self.path, magic, GGUF_MAGIC))
        self.version = cur.u32("version")
        if self.version != GGUF_VERSION:
            raise GGUFError("%s: GGUF version %d not supported (expected 3)" % (self.path, self.version))
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")
        self.metadata = {}
        self.metadata_types = {}
        for i in range(n_kv):
            key = cur.string("metadata key #%d" % i)
            t = cur.u32("type of %s" % key)
            if key in self.metadata:
                raise GGUFError("%s: duplicate metadata key %r" % (self.path, key))
            self.metadata[key] = cur.value(t, "value of %s" % key)
            self.metadata_types[key] = t
        self.alignment = DEFAULT_ALIGNMENT
        if "general.alignment" in self.metadata:
            if self.metadata_types["general.alignment"] != T_U32 or self.metadata["general.alignment"] == 0:
                raise GGUFError("%s: general.alignment must be a nonzero u32" % self.path)
            self.alignment = self.metadata["general.alignment"]
        dirs = []
        for i in range(n_tensors):
            name = cur.string("tensor name #%d" % i)
            nd = cur.u32("ndim of %s" % name)
            if not 1 <= nd <= MAX_DIMS:
                raise GGUFError("%s: tensor %s has ndim %d (expected 1..%d)" % (self.path, name, nd, MAX_DIMS))
            dims = [cur.u64("dim of %s" % name) for _ in range(nd)]
            t = cur.u32("type of %s" % name)
            off = cur.u64("offset of %s" % name)
            dirs.append((name, dims, t, off))
        self.data_offset = align_up(cur.pos, self.alignment)
        self.tensors = {}
        for name, dims, t, off in dirs:
            if name in self.tensors:
                raise GGUFError("%s: duplicate tensor name %r" % (self.path, name))
            if t not in GGML_TYPES:
                warnings.warn("%s: tensor %s has unknown type %d" % (self.path, name, t))
            nb = tensor_nbytes(t, dims)
            absoff = self.data_offset + off
            if absoff + nb > len(self.mm):
                raise GGUFError("%s: tensor %s (%s, %d bytes at offset %d) extends beyond the file end %d"
                                % (self.path, name, dims, nb, absoff, len(self.mm)))
            self.tensors[name] = TensorInfo(name, dims, t, absoff, nb)

    # -- metadata ---------------------------------------------------------------------
    def get(self, key, default=None):
        """Metadata value (GGUFArray for arrays) or `default` if absent."""
        return self.metadata.get(key, default)

    # -- tensors ----------------------------------------------------------------------
    def info(self, name):
        """TensorInfo of `name`; GGUFError if absent."""
        if name not in self.tensors:
            raise GGUFError("%s: tensor %s not found" % (self.path, name))
        return self.tensors[name]

    def raw(self, name):
        """The tensor's bytes as a read-only uint8 view of the mapping."""
        ti = self.info(name)
        if ti.type_id not in GGML_TYPES:
            raise GGUFError("%s: tensor %s has unknown type %d" % (self.path, name, ti.type_id))
        return self.mm[ti.offset:ti.offset + ti.nbytes]

    def row_bytes(self, name):
        """Bytes of one d0-row of tensor `name` (d0 must be a multiple of the block size)."""
        ti = self.info(name)
        _, be, bb = GGML_TYPES[ti.type_id]
        if ti.dims[0] % be:
            raise GGUFError("%s: tensor %s row length %d is not a multiple of the %s block %d"
                            % (self.path, name, ti.dims[0], ti.type_name, be))
        return ti.dims[0] // be * bb

    def tensor(self, name):
        """Dequantized tensor as float64, numpy shape = reversed GGUF dims."""
        from . import quants
        ti = self.info(name)
        flat = quants.dequantize(self.raw(name), ti.type_id, ti.n_elements)
        return flat.reshape(tuple(reversed(ti.dims)))

    def rows(self, name, start, count):
        """Rows [start, start+count) along all non-d0 dims flattened, dequantized to float64,
        shape [count, d0]. Used to read one embedding row or one expert without touching
        the rest of a large tensor."""
        from . import quants
        ti = self.info(name)
        n_rows = ti.n_elements // ti.dims[0]
        if start < 0 or count < 0 or start + count > n_rows:
            raise GGUFError("%s: rows [%d, %d) out of range for tensor %s with %d rows"
                            % (self.path, start, start + count, name, n_rows))
        rb = self.row_bytes(name)
        buf = self.raw(name)[start * rb:(start + count) * rb]
        return quants.dequantize(buf, ti.type_id, count * ti.dims[0]).reshape(count, ti.dims[0])


class GGUFWriter:
    """Builds a GGUF v3 file in memory and writes it (spec §2.1 layout).

    add_kv(key, value, vtype=None): value types are inferred when vtype is None (bool ->
    bool, int -> u32 or i32/u64/i64 by range, float -> f32, str -> string, list/tuple/ndarray
    -> array of the inferred item type); pass vtype (T_* constants) or, for arrays,
    ("array", item_type) to force a type.
    add_tensor(name, data, type_name, dims=None): `data` is a numpy array (F32/F16/BF16/I32
    tensors may be given as float or int arrays and are converted; quantized types need raw
    uint8 bytes and explicit GGUF `dims`).
    write(path): writes header, metadata, directory and aligned data.
    """

    def __init__(self, alignment=DEFAULT_ALIGNMENT):
        self.alignment = alignment
        self.kv = []
        self.tensors = []
        self._names = set()
        if alignment != DEFAULT_ALIGNMENT:
            self.add_kv("general.alignment", alignment, T_U32)

    @staticmethod
    def _infer(v):
        if isinstance(v, (bool, np.bool_)):
            return T_BOOL
        if isinstance(v, (int, np.integer)):
            v = int(v)
            if 0 <= v < 2 ** 32:
                return T_U32
            if -2 ** 31 <= v < 0:
                return T_I32
            if 0 <= v < 2 ** 64:
                return T_U64
            return T_I64
        if isinstance(v, (float, np.floating)):
            return T_F32
        if isinstance(v, str):
            return T_STRING
        if isinstance(v, (list, tuple, np.ndarray)):
            return T_ARRAY
        raise GGUFError("cannot infer GGUF type for %r" % (v,))

    def add_kv(self, key, value, vtype=None):
        if vtype is None:
            vtype = self._infer(value)
        item_type = None
        if isinstance(vtype, tuple):
            vtype, item_type = T_ARRAY, vtype[1]
        if vtype == T_ARRAY and item_type is None:
            items = list(value)
            if not items:
                raise GGUFError("empty array %s needs an explicit item type" % key)
            types = {self._infer(x) for x in items}
            if types == {T_U32, T_I32}:
                types = {T_I32}
            if types == {T_F32}:
                item_type = T_F32
            elif len(types) != 1:
                raise GGUFError("array %s mixes item types %s" % (key, types))
            else:
                item_type = types.pop()
        self.kv.append((key, vtype, item_type, value))

    def add_tensor(self, name, data, type_name, dims=None):
        if name in self._names:
            raise GGUFError("duplicate tensor %s" % name)
        if type_name not in TYPE_IDS:
            raise GGUFError("unknown tensor type %s" % type_name)
        tid = TYPE_IDS[type_name]
        arr = np.asarray(data)
        if dims is None:
            dims = tuple(reversed(arr.shape))
        dims = tuple(int(d) for d in dims)
        if type_name == "F32":
            raw = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        elif type_name == "F16":
            raw = np.ascontiguousarray(arr, dtype="<f2").tobytes()
        elif type_name == "BF16":
            from . import quants
            raw = quants.f32_to_bf16_bits(arr).astype("<u2").tobytes()
        elif type_name == "I32":
            raw = np.ascontiguousarray(arr, dtype="<i4").tobytes()
        else:
            if arr.dtype != np.uint8:
                raise GGUFError("tensor %s of type %s needs raw uint8 block bytes" % (name, type_name))
            raw = arr.tobytes()
        need = tensor_nbytes(tid, dims)
        if len(raw) != need:
            raise GGUFError("tensor %s: %d bytes given, %s %s needs %d" % (name, len(raw), type_name, list(dims), need))
        self._names.add(name)
        self.tensors.append((name, dims, tid, raw))

    @staticmethod
    def _pack_string(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def _pack_value(self, vtype, item_type, value):
        if vtype in _SCALAR_FMT:
            return struct.pack(_SCALAR_FMT[vtype], value)
        if vtype == T_STRING:
            return self._pack_string(value)
        if vtype == T_ARRAY:
            items = list(value) if not isinstance(value, GGUFArray) else value.tolist()
            out = [struct.pack("<IQ", item_type, len(items))]
            for x in items:
                if item_type == T_ARRAY:
                    out.append(self._pack_value(T_ARRAY, self._infer(x[0]) if len(x) else T_U32, x))
                else:
                    out.append(self._pack_value(item_type, None, x))
            return b"".join(out)
        raise GGUFError("unknown value type %d" % vtype)

    def to_bytes(self):
        out = [struct.pack("<IIQQ", GGUF_MAGIC, GGUF_VERSION, len(self.tensors), len(self.kv))]
        for key, vtype, item_type, value in self.kv:
            out.append(self._pack_string(key))
            out.append(struct.pack("<I", vtype))
            out.append(self._pack_value(vtype, item_type, value))
        offsets = []
        off = 0
        for name, dims, tid, raw in self.tensors:
            off = align_up(off, self.alignment)
            offsets.append(off)
            off += len(raw)
        for (name, dims, tid, raw), toff in zip(self.tensors, offsets):
            out.append(self._pack_string(name))
            out.append(struct.pack("<I", len(dims)))
            out.append(struct.pack("<%dQ" % len(dims), *dims))
            out.append(struct.pack("<IQ", tid, toff))
        head = b"".join(out)
        data_start = align_up(len(head), self.alignment)
        body = bytearray(data_start - len(head))
        pos = 0
        for (name, dims, tid, raw), toff in zip(self.tensors, offsets):
            body += bytes(toff - pos)
            body += raw
            pos = toff + len(raw)
        return head + bytes(body)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(self.to_bytes())
