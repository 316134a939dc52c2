"""Checks that keras-cpp's safetensors files and Python's safetensors library read each other.

Usage: check_safetensors.py PATH_TO_safetensors_tool
Exits 77 (CTest's "skipped") when the safetensors or numpy module is not installed.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors.numpy import load_file, save_file
    from safetensors import safe_open
except ImportError as error:  # the test is skipped, not failed, where the library is absent
    print(f"skipping: {error} (pip install safetensors numpy)")
    sys.exit(77)

EXPECTED = {
    "sequential/dense/kernel": np.array([[1.5, -2.0, 3.25], [0.0, 5.0, -6.5]], dtype=np.float32),
    "sequential/dense/bias": np.array([0.25, -1e300, 7.0], dtype=np.float64),
    "counts": np.array([1, -2, 3000000000], dtype=np.int64),
    "small": np.array([[-7], [8]], dtype=np.int32),
    "bytes": np.array([0, 255, 17], dtype=np.uint8),
    "scalar": np.array(3.5, dtype=np.float32),
}


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as directory:
        ours = os.path.join(directory, "from_keras_cpp.safetensors")
        subprocess.run([tool, "write", ours], check=True)
        loaded = load_file(ours)
        assert sorted(loaded) == sorted(EXPECTED), f"names differ: {sorted(loaded)}"
        for name, expected in EXPECTED.items():
            got = loaded[name]
            assert got.dtype == expected.dtype, f"{name}: dtype {got.dtype} != {expected.dtype}"
            assert got.shape == expected.shape, f"{name}: shape {got.shape} != {expected.shape}"
            assert np.array_equal(got, expected), f"{name}: values {got} != {expected}"
        with safe_open(ours, framework="numpy") as handle:
            assert handle.metadata() == {"format": "keras-cpp"}, handle.metadata()

        theirs = os.path.join(directory, "from_python.safetensors")
        save_file(EXPECTED, theirs, metadata={"written_by": "python"})
        subprocess.run([tool, "check", theirs], check=True)
    print("safetensors files round-trip between keras-cpp and Python's safetensors library")


if __name__ == "__main__":
    main()
