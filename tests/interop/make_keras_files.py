"""Writes tests/reference/keras_files/: for each model of keras_file_models.py, trained two
steps with Adam in Keras 3 on JAX (so BatchNormalization's moving statistics and the optimizer's
state are not their initial values), the files Keras saves — NAME.weights.h5 (save_weights) and
NAME.keras (save) — and NAME.io.h5 with the inputs (x0, x1, ...), Keras' predictions (y) and the
optimizer's iterations (0 for the convnet, whose optimizer is made afresh before saving).
tests/keras_files_test.cpp loads them with no Python. Run it in the Keras + JAX virtual
environment after changing a model:

    KERAS_BACKEND=jax $VENV/bin/python tests/interop/make_keras_files.py
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


def main():
    os.makedirs(OUT, exist_ok=True)
    for index, name in enumerate(keras_file_models.NAMES):
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
