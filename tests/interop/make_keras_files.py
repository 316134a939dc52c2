"""Writes tests/reference/keras_files/: for each model of keras_file_models.py, trained two
steps with Adam in Keras 3 on JAX (so BatchNormalization's moving statistics and the optimizer's
state are not their initial values), the files Keras saves — NAME.weights.h5 (save_weights) and
NAME.keras (save) — and NAME.io.h5 with the inputs (x0, x1, ...), Keras' predictions (y) and the
optimizer's iterations (0 for the convnet, whose optimizer is made afresh before saving); and
mlp_loss_scaled.*, the MLP under LossScaleOptimizer (its dynamic_scale and step_counter), and
dense_{bfloat16,float16}.weights.h5 (16-bit variables; dense_half.io.h5 holds their values).
tests/keras_files_test.cpp loads them with no Python. Run it in the Keras + JAX virtual
environment after changing a model (names given: only those files are written again):

    KERAS_BACKEND=jax $VENV/bin/python tests/interop/make_keras_files.py [NAME ...]
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import h5py  # noqa: E402
import keras  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_file_models  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "keras_files")


def loss_scaled():
    """mlp_loss_scaled.*: the MLP under LossScaleOptimizer(Adam(0.01), initial_scale=1024,
    dynamic_growth_steps=3) after 4 finite steps: dynamic_scale 2048, step_counter 1."""
    keras.utils.set_random_seed(1100)
    model = keras_file_models.build("mlp")
    model.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01), initial_scale=1024.0,
                                                                dynamic_growth_steps=3), loss="mse")
    x = keras_file_models.inputs("mlp")
    model.fit(x, keras_file_models.targets("mlp"), batch_size=2, epochs=2, verbose=0)
    y = model.predict(x, verbose=0)
    model.save_weights(os.path.join(OUT, "mlp_loss_scaled.weights.h5"))
    model.save(os.path.join(OUT, "mlp_loss_scaled.keras"))
    with h5py.File(os.path.join(OUT, "mlp_loss_scaled.io.h5"), "w") as io:
        io["x0"] = x[0]
        io["y"] = y
        io.attrs["keras_version"] = keras.__version__
        io.attrs["iterations"] = int(model.optimizer.iterations.numpy())
        io.attrs["dynamic_scale"] = float(model.optimizer.dynamic_scale.numpy())
        io.attrs["step_counter"] = int(model.optimizer.step_counter.numpy())
    print(f"mlp_loss_scaled: dynamic_scale {float(model.optimizer.dynamic_scale.numpy())}, step_counter "
          f"{int(model.optimizer.step_counter.numpy())}, iterations {int(model.optimizer.iterations.numpy())}")


def half_policies():
    """dense_bfloat16.weights.h5 and dense_float16.weights.h5: Dense(3) on 4 features under the
    pure "bfloat16" and "float16" policies (16-bit variables: Keras stores bfloat16 as opaque
    2-byte elements with the attribute dtype="bfloat16", float16 as IEEE halves), and
    dense_half.io.h5 with each file's kernel and bias as float32 (exact)."""
    with h5py.File(os.path.join(OUT, "dense_half.io.h5"), "w") as io:
        for index, policy in enumerate(["bfloat16", "float16"]):
            keras.utils.set_random_seed(1200 + index)
            keras.config.set_dtype_policy(policy)
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, bias_initializer="random_normal")])
            model.save_weights(os.path.join(OUT, f"dense_{policy}.weights.h5"))
            io[f"{policy}_kernel"] = keras.ops.convert_to_numpy(keras.ops.cast(model.layers[0].kernel, "float32"))
            io[f"{policy}_bias"] = keras.ops.convert_to_numpy(keras.ops.cast(model.layers[0].bias, "float32"))
            keras.config.set_dtype_policy("float32")
        io.attrs["keras_version"] = keras.__version__
    print("dense_bfloat16, dense_float16: written")


def main():
    os.makedirs(OUT, exist_ok=True)
    # Names given: only those (so that the other files stay as committed).
    wanted = sys.argv[1:] or keras_file_models.NAMES + ["mlp_loss_scaled", "dense_half"]
    if "mlp_loss_scaled" in wanted:
        loss_scaled()
    if "dense_half" in wanted:
        half_policies()
    for index, name in enumerate(keras_file_models.NAMES):
        if name not in wanted:
            continue
        keras.utils.set_random_seed(1000 + index)
        model = keras_file_models.build(name)
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        x = keras_file_models.inputs(name)
        model.fit(x, keras_file_models.targets(name), batch_size=2, epochs=1, verbose=0)
        y = model.predict(x, verbose=0)
        if name == "convnet":
            # A fresh optimizer (iterations and learning_rate only) keeps the committed files
            # small; the other three carry Adam's state.
            model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        model.save_weights(os.path.join(OUT, f"{name}.weights.h5"))
        model.save(os.path.join(OUT, f"{name}.keras"))
        with h5py.File(os.path.join(OUT, f"{name}.io.h5"), "w") as io:
            for i, array in enumerate(x):
                io[f"x{i}"] = array
            io["y"] = y
            io.attrs["keras_version"] = keras.__version__
            io.attrs["iterations"] = int(model.optimizer.iterations.numpy())
            io.attrs["learning_rate"] = float(model.optimizer.learning_rate.numpy())
        print(f"{name}: {model.count_params()} parameters, y {y.shape}")


if __name__ == "__main__":
    main()
