#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses into corpus/<harness>/ (run from anywhere).
The safetensors seeds have no extension: the repository's .gitignore ignores *.safetensors.

Valid files (safetensors, IDX plain and gzip) and a few broken ones; for the two harnesses that
decode their input with FuzzedDataProvider, inputs encoded the way the harness reads them, so
that the seeds start from meaningful calls (a 2x4 mesh with a LayoutMap, KERAS_*=30, ...).
"""
import gzip
import json
import os
import shutil
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(harness, name, data):
    os.makedirs(os.path.join(ROOT, harness), exist_ok=True)
    with open(os.path.join(ROOT, harness, name), "wb") as f:
        f.write(data)


# --- safetensors ---------------------------------------------------------------------------
def safetensors(tensors, metadata=None, pad=True):
    header, data, offset = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    h = "safetensors_fuzzer"
    two = safetensors([("dense/kernel", "F32", [2, 2], struct.pack("<4f", 1, -2, 0.5, 3)),
                       ("dense/bias", "I64", [3], struct.pack("<3q", 1, -1, 1 << 40))],
                      metadata={"format": "pt"})
    write(h, "two_tensors", two)
    write(h, "all_dtypes", safetensors([
        ("a", "F64", [1], struct.pack("<d", 2.5)), ("b", "I32", [2], struct.pack("<2i", -7, 7)),
        ("c", "U8", [2, 1], b"\x00\xff"), ("d", "BOOL", [3], b"\x01\x00\x01"),
        ("e", "F32", [0, 3], b""), ("s", "F32", [], struct.pack("<f", 1))]))
    write(h, "empty_header", safetensors([], pad=False))
    write(h, "metadata_only", safetensors([], metadata={"k": "v", "": "\u00e9"}))
    # Broken: cut short, a gap in the data, an unsupported dtype, a header length past the end.
    write(h, "truncated", two[:-5])
    write(h, "gap", safetensors([("x", "U8", [1], b"\x01")]) + b"\x00")
    write(h, "bad_dtype", safetensors([("x", "F16", [1], b"\x00\x00")]))
    write(h, "long_header", struct.pack("<Q", 1 << 20) + b"{}")
    # Once accepted or crashing (regression seeds): JSON after a NUL, a key twice, deep nesting.
    def raw_header(text, data=b""):
        return struct.pack("<Q", len(text)) + text + data
    write(h, "nul_then_garbage",
          raw_header(b'{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}\0garbage', b"\x07"))
    write(h, "duplicate_key", raw_header(
        b'{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        b'"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x07"))
    write(h, "deep_nesting", raw_header(b'{"x":' + b"[" * 2000 + b"]" * 2000 + b"}"))


# --- IDX -----------------------------------------------------------------------------------
def idx(type_code, shape, raw):
    return bytes([0, 0, type_code, len(shape)]) + b"".join(struct.pack(">I", d) for d in shape) + raw


def idx_seeds():
    h = "idx_fuzzer"
    images = idx(0x08, [2, 2, 3], bytes(range(12)))
    labels = idx(0x08, [2], b"\x03\x09")
    ints = idx(0x0C, [2], struct.pack(">2i", -1, 1 << 20))
    floats = idx(0x0D, [1, 2], struct.pack(">2f", 1.5, -0.25))
    doubles = idx(0x0E, [1], struct.pack(">d", 3.0))
    write(h, "images_u8.idx", images)
    write(h, "labels_u8.idx", labels)
    write(h, "int32.idx", ints)
    write(h, "float32.idx", floats)
    write(h, "float64.idx", doubles)
    write(h, "images_u8.idx.gz", gzip.compress(images, mtime=0))
    write(h, "float32.idx.gz", gzip.compress(floats, mtime=0))
    # Broken: cut short, bad magic, rank 0, a gzip stream cut short.
    write(h, "truncated.idx", images[:-3])
    write(h, "bad_magic.idx", b"\x01" + images[1:])
    write(h, "rank0.idx", b"\x00\x00\x08\x00")
    write(h, "truncated.idx.gz", gzip.compress(images, mtime=0)[:-6])
    # Two gzip members (valid, as gzip -d reads them), then bytes after the gzip data, and a
    # shape without elements whose strides overflow (the last two once accepted or crashing).
    write(h, "two_members.idx.gz",
          gzip.compress(images[:7], mtime=0) + gzip.compress(images[7:], mtime=0))
    write(h, "trailing_garbage.idx.gz", gzip.compress(labels, mtime=0) + b"junk")
    write(h, "zero_size_overflow.idx", idx(0x08, [0xFFFFFFFF, 0xFFFFFF0A, 0], b""))


# --- FuzzedDataProvider encoding -------------------------------------------------------------
class Provider:
    """Builds an input that FuzzedDataProvider (clang 14) reads back as the given calls: strings
    come from the front, integers from the back."""

    def __init__(self):
        self.front, self.back = bytearray(), bytearray()

    def integer(self, value, lo, hi, size=8):
        # ConsumeIntegralInRange pulls one byte per 8 bits of the span, most significant first.
        span, raw, count = hi - lo, (value - lo) % (1 << 64), 0
        while count < size and (span >> (8 * count)) > 0:
            count += 1
        for i in reversed(range(count)):
            self.back.append((raw >> (8 * i)) & 0xFF)
        return self

    def probability(self, p):  # ConsumeProbability<double>: a uint64 over its maximum
        return self.integer(round(p * ((1 << 64) - 1)), 0, (1 << 64) - 1)

    def boolean(self, value):
        self.back.append(1 if value else 0)
        return self

    def string(self, text):
        # ConsumeRandomLengthString: "\\\\" is one backslash, "\\" + other ends the string.
        self.front += text.encode().replace(b"\\", b"\\\\") + b"\\ "
        return self

    def rest(self, text):
        self.front += text.encode()
        return self

    def bytes(self):
        # The back is consumed from the last byte, so it is laid out reversed.
        return bytes(self.front) + bytes(reversed(self.back))


def environment_seeds():
    h = "environment_fuzzer"
    min64, max64 = -(1 << 63), (1 << 63) - 1
    write(h, "jobs_two", Provider().integer(2, 0, 2, 4).boolean(True).boolean(True)
          .integer(2, 0, 8, 4).rest("10.0.0.1:1234,worker-1:65535").bytes())
    write(h, "jobs_bad_port", Provider().integer(2, 0, 2, 4).boolean(False)
          .rest("host:0,:80,h:65536,h:+1").bytes())
    write(h, "integer_30", Provider().integer(0, 0, 2, 4).string("KERAS_NUM_THREADS")
          .integer(1, min64, max64).integer(1024, min64, max64).boolean(True).rest("30").bytes())
    write(h, "integer_sign", Provider().integer(0, 0, 2, 4).string("N").integer(-5, min64, max64)
          .integer(5, min64, max64).boolean(True).rest("+-5").bytes())
    # min 0.001 s, max 3600 s (a value in [-1e12, 1e12]), "30.5" / "inf" / "0.0004".
    max_3600 = (3600 + 1e12) / 2e12
    for name, text in (("seconds_30", "30.5"), ("seconds_inf", "inf"), ("seconds_tiny", "0.0004")):
        write(h, name, Provider().integer(1, 0, 2, 4).string("KERAS_COLLECTIVE_TIMEOUT_SECONDS")
              .integer(1, 0, 5, 4).integer(5, 0, 5, 4).probability(max_3600)
              .boolean(True).rest(text).bytes())


def layout_seeds():
    h = "layout_fuzzer"
    p = Provider()
    p.integer(2, 0, 4, 4)                                     # mesh rank 2
    for dim in (2, 4):
        p.integer(3, 0, 7, 4).integer(dim, 1, 4)              # small dimensions
    p.integer(1, 0, 7, 4)                                     # as many names as dimensions
    p.boolean(False).string("batch").boolean(False).string("model")
    p.integer(1, 0, 3, 4)                                     # devices cpu:0 .. cpu:7
    p.integer(3, 0, 7, 4)                                     # check_mesh: device 3
    p.boolean(True).integer(1, 0, 1, 8)                       # axis_index('model')
    p.integer(5, -(1 << 63), (1 << 63) - 1)                   # coordinates(5)
    p.boolean(True)                                           # LayoutMap(mesh)
    p.integer(1, 0, 8, 4).string("dense.*/kernel")            # layout_map["dense.*/kernel"]
    p.integer(2, 0, 5, 4).boolean(False).boolean(True).boolean(True).integer(1, 0, 1, 8)
    p.boolean(True)                                           # = [None, 'model']
    p.integer(3, 0, 8, 4).boolean(False).rest("dense_1/kernel")  # get(...)
    write(h, "mesh_2x4_map", p.bytes())
    write(h, "bad_regex", Provider().integer(1, 0, 4, 4).integer(3, 0, 7, 4).integer(1, 1, 4)
          .integer(1, 0, 7, 4).boolean(False).string("x").integer(0, 0, 3, 4).integer(0, 0, 0)
          .boolean(False).integer(0, -(1 << 63), (1 << 63) - 1).boolean(True)
          .integer(1, 0, 8, 4).string("(unclosed[").bytes())
    write(h, "text", b"batch\\ model\\ dense/.*\\ dense/kernel\x02\x03\x01\x04\x00\x01")


# --- rendezvous store requests -------------------------------------------------------------
def store_request(operation, key, value=b""):
    return operation + struct.pack("<II", len(key), len(value)) + key + value


def store_seeds():
    h = "store_fuzzer"
    counter = struct.pack("<q", 3)
    session = (store_request(b"S", b"join/claimed/0", b"1") + store_request(b"G", b"join/claimed/0") +
               store_request(b"A", b"leave", counter) + store_request(b"D", b"join/claimed/0") +
               store_request(b"G", b"missing"))
    for mode, name in ((0, "open"), (1, "token_answered")):
        write(h, f"{name}_session", bytes([mode]) + session)
    write(h, "open_limits", bytes([0]) + b"".join(store_request(b"S", b"k%d" % i, b"v" * 200) for i in range(12)))
    write(h, "open_huge_prefix", bytes([0]) + b"S" + struct.pack("<II", 4, 0xFFFFFFFF) + b"key!")
    write(h, "token_wrong_answer", bytes([2]) + bytes(64) + session)


def keras_config_seeds():
    """The config.json of each archive Python Keras wrote (tests/reference/keras_files), and a
    few small ones by hand: a Sequential without an InputLayer, a shared layer, a bad field."""
    import zipfile
    h = "keras_config_fuzzer"
    references = os.path.join(os.path.dirname(ROOT), "..", "reference", "keras_files")
    for name in sorted(os.listdir(references)):
        if name.endswith(".keras"):
            with zipfile.ZipFile(os.path.join(references, name)) as archive:
                write(h, name.replace(".keras", "_config"), archive.read("config.json"))
    dense = {"class_name": "Dense", "config": {"name": "d", "units": 3, "activation": "relu"}}
    write(h, "sequential_build_input_shape", json.dumps(
        {"class_name": "Sequential", "config": {"name": "s", "layers": [dense], "build_input_shape": [None, 4]}}).encode())
    tensor = {"class_name": "__keras_tensor__", "config": {"shape": [None, 4], "keras_history": ["x", 0, 0]}}
    shared = {"class_name": "Dense", "config": {"name": "shared", "units": 4}, "name": "shared",
              "inbound_nodes": [{"args": [tensor], "kwargs": {}},
                                {"args": [dict(tensor, config={"shape": [None, 4], "keras_history": ["shared", 0, 0]})],
                                 "kwargs": {}}]}
    write(h, "functional_shared_layer", json.dumps(
        {"class_name": "Functional", "config": {"name": "f", "layers": [
            {"class_name": "InputLayer", "config": {"batch_shape": [None, 4], "name": "x"}, "name": "x", "inbound_nodes": []},
            shared], "input_layers": ["x", 0, 0], "output_layers": ["shared", 1, 0]}}).encode())
    write(h, "unknown_field", json.dumps(
        {"class_name": "Sequential", "config": {"name": "s", "layers": [
            {"class_name": "InputLayer", "config": {"batch_shape": [None, 2]}},
            {"class_name": "Dense", "config": {"units": 1, "sparkle": True}}]}}).encode())


if __name__ == "__main__":
    shutil.rmtree(ROOT, ignore_errors=True)
    safetensors_seeds()
    idx_seeds()
    environment_seeds()
    layout_seeds()
    store_seeds()
    keras_config_seeds()
