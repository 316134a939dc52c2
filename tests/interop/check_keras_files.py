"""Files written by keras-cpp load in Python Keras 3 (on JAX) and predict what keras-cpp
predicted, within 1e-6: keras_files_tool trains the four models of keras_file_models.py two
steps here and writes NAME.weights.h5, NAME.keras and NAME.io.h5 (inputs and our predictions);
Keras then builds each model itself and load_weights() it (with a compiled Adam, whose state
must come along: iterations 2), and load_model()s the archive. The other direction,
Keras' files loaded here, is tests/keras_files_test.cpp. Skipped (77) without the Keras + JAX
virtual environment (KERAS_JAX_VENV; python3 benchmarks/compare_keras_jax.py creates it).

    python3 tests/interop/check_keras_files.py build/ci/tests/keras_files_tool
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_check  # noqa: E402
import keras_file_models  # noqa: E402

TOLERANCE = 1e-6
# A step of Adam adds float32 rounding of its own on each side (the update divides by
# sqrt(v) + epsilon, which magnifies last-bit differences of v).
STEP_TOLERANCE = 1e-5


def keras_side(directory):
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import h5py
    import keras
    import numpy as np
    failed = 0
    for name in keras_file_models.NAMES:
        with h5py.File(os.path.join(directory, f"{name}.io.h5")) as io:
            x = [np.asarray(io[f"x{i}"]) for i in range(len([k for k in io.keys() if k.startswith("x")]))]
            targets = np.asarray(io["targets"])
            ours = np.asarray(io["y"])
            ours_after_step = np.asarray(io["y_after_step"])
        model = keras_file_models.build(name)
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        # Keras loads an optimizer's state only into a built optimizer.
        model.optimizer.build(model.trainable_variables)
        model.load_weights(os.path.join(directory, f"{name}.weights.h5"))
        weights_error = float(np.max(np.abs(model.predict(x, verbose=0) - ours)))
        iterations = int(model.optimizer.iterations.numpy())
        loaded = keras.saving.load_model(os.path.join(directory, f"{name}.keras"))
        archive_error = float(np.max(np.abs(loaded.predict(x, verbose=0) - ours)))
        # The archive's compile_config compiles it in Keras, with Adam's state from its weights.
        archive_iterations = int(loaded.optimizer.iterations.numpy()) if loaded.optimizer else -1
        # The next step, from Adam's loaded state (the convnet's Dropout draws differ, so its
        # step is not compared).
        step_error = 0.0
        if name != "convnet":
            model.fit(x, targets, batch_size=4, epochs=1, shuffle=False, verbose=0)
            step_error = float(np.max(np.abs(model.predict(x, verbose=0) - ours_after_step)))
        ok = max(weights_error, archive_error) <= TOLERANCE and step_error <= STEP_TOLERANCE and iterations == 2 and archive_iterations == 2
        failed += 0 if ok else 1
        print(f"{name}: .weights.h5 {weights_error:.2e}, .keras {archive_error:.2e}, Adam iterations "
              f"{iterations} (from the archive {archive_iterations}), after one more step {step_error:.2e} {'ok' if ok else 'FAILED'} (Keras {keras.__version__})")
    failed += 0 if loss_scaled_side(directory) else 1
    failed += 0 if half_policy_side(directory) else 1
    sys.exit(1 if failed else 0)


def half_policy_side(directory):
    """dense_{bfloat16,float16}.weights.h5: our 16-bit variables load into Keras' Dense under
    the same pure policy, bit for bit."""
    import h5py
    import keras
    import numpy as np
    ok = True
    for policy in ("bfloat16", "float16"):
        with h5py.File(os.path.join(directory, f"dense_{policy}.io.h5")) as io:
            kernel, bias = np.asarray(io["kernel"]), np.asarray(io["bias"])
        keras.config.set_dtype_policy(policy)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.load_weights(os.path.join(directory, f"dense_{policy}.weights.h5"))
        keras.config.set_dtype_policy("float32")
        layer = model.layers[0]
        same = (layer.kernel.dtype == policy and
                np.array_equal(keras.ops.convert_to_numpy(keras.ops.cast(layer.kernel, "float32")), kernel) and
                np.array_equal(keras.ops.convert_to_numpy(keras.ops.cast(layer.bias, "float32")), bias))
        ok = ok and same
        print(f"dense_{policy}: Keras' {layer.kernel.dtype} Dense holds our values {'exactly ok' if same else 'NOT: FAILED'}")
    return ok


def loss_scaled_side(directory):
    """mlp_loss_scaled.*: our LossScaleOptimizer(Adam(0.01), initial_scale=1024,
    dynamic_growth_steps=3) after 4 finite steps holds dynamic_scale 2048 and step_counter 1,
    in Keras' variables, from the weights file and from the archive (whose compile_config
    names LossScaleOptimizer around Adam); one more step lands where ours did."""
    import h5py
    import keras
    import numpy as np
    with h5py.File(os.path.join(directory, "mlp_loss_scaled.io.h5")) as io:
        x = [np.asarray(io["x0"])]
        targets = np.asarray(io["targets"])
        ours = np.asarray(io["y"])
        ours_after_step = np.asarray(io["y_after_step"])
    model = keras_file_models.build("mlp")
    model.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01), initial_scale=1024.0,
                                                                dynamic_growth_steps=3), loss="mse")
    model.optimizer.build(model.trainable_variables)
    model.load_weights(os.path.join(directory, "mlp_loss_scaled.weights.h5"))
    weights_error = float(np.max(np.abs(model.predict(x, verbose=0) - ours)))
    state = (float(model.optimizer.dynamic_scale.numpy()), int(model.optimizer.step_counter.numpy()),
             int(model.optimizer.iterations.numpy()))
    loaded = keras.saving.load_model(os.path.join(directory, "mlp_loss_scaled.keras"))
    archive_error = float(np.max(np.abs(loaded.predict(x, verbose=0) - ours)))
    archive_optimizer = loaded.optimizer
    archive_state = (type(archive_optimizer).__name__, archive_optimizer.initial_scale,
                     archive_optimizer.dynamic_growth_steps, float(archive_optimizer.dynamic_scale.numpy()),
                     int(archive_optimizer.step_counter.numpy()), int(archive_optimizer.iterations.numpy()))
    model.fit(x, targets, batch_size=4, epochs=1, shuffle=False, verbose=0)
    step_error = float(np.max(np.abs(model.predict(x, verbose=0) - ours_after_step)))
    ok = (max(weights_error, archive_error) <= TOLERANCE and step_error <= STEP_TOLERANCE and state == (2048.0, 1, 4)
          and archive_state == ("LossScaleOptimizer", 1024.0, 3, 2048.0, 1, 4))
    print(f"mlp_loss_scaled: .weights.h5 {weights_error:.2e}, .keras {archive_error:.2e}, (dynamic_scale, "
          f"step_counter, iterations) {state}, from the archive {archive_state}, after one more step "
          f"{step_error:.2e} {'ok' if ok else 'FAILED'}")
    return ok


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--keras-side":
        keras_side(sys.argv[2])
        return 0
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    python = os.path.join(keras_check.VENV, "bin", "python")
    if not os.access(python, os.X_OK):
        print(f"skipped: no Keras + JAX virtual environment at {keras_check.VENV} "
              "(python3 benchmarks/compare_keras_jax.py creates it)")
        return keras_check.SKIP
    with tempfile.TemporaryDirectory() as directory:
        made = subprocess.run([sys.argv[1], directory], capture_output=True, text=True)
        if made.returncode != 0:
            print(f"keras_files_tool failed:\n{made.stdout}\n{made.stderr}")
            return 1
        environment = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="jax")
        checked = subprocess.run([python, os.path.abspath(__file__), "--keras-side", directory],
                                 capture_output=True, text=True, env=environment)
        print(checked.stdout)
        if checked.returncode != 0:
            print(checked.stderr[-4000:])
        return checked.returncode


if __name__ == "__main__":
    sys.exit(main())
