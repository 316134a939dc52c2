"""What the checks against Keras 3 + JAX share (check_keras_attention.py,
check_keras_convolution.py): where the virtual environment is, the skip status, a safetensors
writer, and the driver that makes Keras' answers in the venv and runs our tool on each case.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

VENV = os.environ.get("KERAS_JAX_VENV",
                      os.path.join(os.path.expanduser("~"), ".cache", "keras-cpp", "keras-jax-venv"))
SKIP = 77


def write_safetensors(path, tensors):
    """The safetensors format by hand: an 8-byte header length, JSON, then the raw bytes."""
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = array.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def run_checks(script, tool, case_names, tool_arguments):
    """Runs `script --keras-side DIR` in the venv (it writes NAME.safetensors and NAME.json per
    case), then `tool FILE *tool_arguments(config)` for each case; returns the exit status."""
    python = os.path.join(VENV, "bin", "python")
    if not os.access(python, os.X_OK):
        print(f"skipped: no Keras + JAX virtual environment at {VENV} "
              "(python3 benchmarks/compare_keras_jax.py creates it)")
        return SKIP
    with tempfile.TemporaryDirectory() as directory:
        environment = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
        made = subprocess.run([python, os.path.abspath(script), "--keras-side", directory],
                              capture_output=True, text=True, env=environment)
        if made.returncode != 0:
            print(f"the Keras side failed:\n{made.stdout}\n{made.stderr}")
            return 1
        failed = 0
        for name in case_names:
            with open(os.path.join(directory, name + ".json")) as handle:
                config = json.load(handle)
            command = [tool, os.path.join(directory, name + ".safetensors"), *tool_arguments(config)]
            result = subprocess.run(command, capture_output=True, text=True)
            print(f"{name} (Keras {config['keras']}, JAX {config['jax']}): {result.stdout.strip()}")
            if result.returncode != 0:
                print(result.stderr)
                failed += 1
        return 1 if failed else 0


def main(script, doc, keras_side, case_names, tool_arguments):
    if len(sys.argv) == 3 and sys.argv[1] == "--keras-side":
        keras_side(sys.argv[2])
        return 0
    if len(sys.argv) != 2:
        print(doc)
        return 2
    return run_checks(script, sys.argv[1], case_names, tool_arguments)
