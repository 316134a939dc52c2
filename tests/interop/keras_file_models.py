"""The four models whose files travel between Python Keras and keras-cpp, built in Keras 3 as
tests/keras_files_test.cpp and tests/interop/keras_files_tool.cpp build them in C++: an MLP, the
convnet of Keras' distributed-training guide (BatchNormalization without scale), a functional
model with two inputs, a small transformer block, and branches whose Keras order differs from
their running order. Each model's inputs come from a seeded
generator, so both sides feed the same numbers.
"""
import numpy as np

NAMES = ["mlp", "convnet", "two_inputs", "transformer_block", "branches"]


def build(name):
    import keras
    from keras import layers
    if name == "mlp":
        return keras.Sequential([keras.Input((8,)), layers.Dense(16, activation="relu"), layers.Dense(4)])
    if name == "convnet":
        return keras.Sequential([
            keras.Input((28, 28, 1)),
            layers.Rescaling(1.0 / 255.0),
            layers.Conv2D(12, 3, padding="same", use_bias=False),
            layers.BatchNormalization(scale=False),
            layers.ReLU(),
            layers.Conv2D(24, 6, strides=2, use_bias=False),
            layers.BatchNormalization(scale=False),
            layers.ReLU(),
            layers.Conv2D(32, 6, strides=2, padding="same", name="large_k"),
            layers.BatchNormalization(scale=False),
            layers.ReLU(),
            layers.GlobalAveragePooling2D(),
            layers.Dense(256, activation="relu"),
            layers.Dropout(0.5),
            layers.Dense(10),
        ])
    if name == "two_inputs":
        a = keras.Input((8,), name="a")
        b = keras.Input((4,), name="b")
        x = layers.Concatenate()([layers.Dense(8, activation="tanh")(a), b])
        return keras.Model([a, b], layers.Dense(3)(x))
    if name == "transformer_block":
        t = keras.Input((5, 8))
        h = layers.MultiHeadAttention(2, 4)(t, t)
        h = layers.LayerNormalization()(layers.Add()([t, h]))
        f = layers.Dense(16, activation="relu")(h)
        f = layers.Dense(8)(f)
        return keras.Model(t, layers.LayerNormalization()(layers.Add()([h, f])))
    if name == "branches":
        # Keras numbers layers by depth from the outputs, not in the order they run: here A1
        # (dense) comes before B1 (dense_1) and A2 (dense_2).
        x = keras.Input((6,))
        b1 = layers.Dense(4, activation="relu")(x)
        a2 = layers.Dense(3, activation="relu")(layers.Dense(5, activation="relu")(x))
        return keras.Model(x, layers.Dense(2)(layers.Concatenate()([b1, a2])))
    raise ValueError(name)


def inputs(name, rows=4):
    """The model's inputs (a list, one per input), the same on every run."""
    rng = np.random.default_rng({"mlp": 1, "convnet": 2, "two_inputs": 3, "transformer_block": 4, "branches": 5}[name])
    if name == "mlp":
        return [rng.normal(size=(rows, 8)).astype("float32")]
    if name == "convnet":
        return [rng.uniform(0, 255, size=(rows, 28, 28, 1)).astype("float32")]
    if name == "two_inputs":
        return [rng.normal(size=(rows, 8)).astype("float32"), rng.normal(size=(rows, 4)).astype("float32")]
    if name == "branches":
        return [rng.normal(size=(rows, 6)).astype("float32")]
    return [rng.normal(size=(rows, 5, 8)).astype("float32")]


def targets(name, rows=4):
    rng = np.random.default_rng(100)
    width = {"mlp": 4, "convnet": 10, "two_inputs": 3, "branches": 2}.get(name)
    shape = (rows, 5, 8) if width is None else (rows, width)
    return rng.normal(size=shape).astype("float32")
