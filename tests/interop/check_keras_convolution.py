#!/usr/bin/python3
"""keras-cpp's Conv2D, BatchNormalization and pooling against Keras 3's on JAX: the same
weights (copied through a safetensors file) and inputs give, for Conv2D followed by
BatchNormalization in training, the same outputs, the same gradients (of the input and of
every weight, for loss = sum(output * probe)) and the same updated moving statistics, then the
same inference output from them; and max / average pooling ("same", stride 2) the same outputs
and input gradients. Within 1e-5 relative to max(1, |Keras' value|).

Keras and JAX come from the virtual environment of benchmarks/compare_keras_jax.py
(KERAS_JAX_VENV, default ~/.cache/keras-cpp/keras-jax-venv); without it the check is skipped
(exit 77): the tests never install anything.

  check_keras_convolution.py CONVOLUTION_TOOL
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_check  # noqa: E402
from keras_check import write_safetensors  # noqa: E402

# (name, input shape, filters, kernel (h, w), strides, padding, dilation, groups, use_bias)
CASES = [
    ("same_stride1_with_bias", (2, 7, 7, 3), 4, (3, 3), 1, "same", 1, 1, True),
    ("guide_valid_stride2_window6", (2, 12, 12, 2), 5, (6, 6), 2, "valid", 1, 1, False),
    ("same_stride2_uneven_padding", (1, 9, 8, 3), 4, (4, 3), 2, "same", 1, 1, True),
    ("dilated_same", (1, 9, 9, 2), 3, (3, 3), 1, "same", 2, 1, True),
    ("groups2_valid", (2, 6, 6, 4), 6, (3, 3), 1, "valid", 1, 2, True),
]


def keras_side(directory):
    """Runs in the venv: writes one file per case with weights, inputs and Keras' answers."""
    os.environ["KERAS_BACKEND"] = "jax"
    import jax
    import keras
    import numpy as np

    generator = np.random.default_rng(7)
    for name, shape, filters, kernel, strides, padding, dilation, groups, use_bias in CASES:
        keras.utils.set_random_seed(1)
        conv = keras.layers.Conv2D(filters, kernel, strides=strides, padding=padding, dilation_rate=dilation,
                                   groups=groups, use_bias=use_bias, name="conv")
        norm = keras.layers.BatchNormalization(momentum=0.9, name="norm")
        x = generator.standard_normal(shape).astype(np.float32)
        hidden = conv(x)
        norm(hidden)
        for variable in conv.weights + norm.weights:
            value = generator.standard_normal(variable.shape).astype(np.float32) * 0.5
            if "variance" in variable.path:
                value = np.abs(value) + 0.5
            variable.assign(value)
        probe = generator.standard_normal(hidden.shape).astype(np.float32)
        tensors = {"x": x, "probe": probe}
        for variable in conv.weights + norm.weights:
            tensors[variable.path] = np.asarray(variable.value)
        conv_trainable = [v.value for v in conv.trainable_variables]
        norm_trainable = [v.value for v in norm.trainable_variables]
        norm_moving = [v.value for v in norm.non_trainable_variables]

        def loss_of(conv_trainable, norm_trainable, x):
            hidden, _ = conv.stateless_call(conv_trainable, [], x)
            output, moving = norm.stateless_call(norm_trainable, norm_moving, hidden, training=True)
            return (output * probe).sum(), (output, moving, hidden)

        (_, (output, moving, hidden)), gradients = jax.value_and_grad(loss_of, argnums=(0, 1, 2), has_aux=True)(
            conv_trainable, norm_trainable, x)
        inference, _ = norm.stateless_call(norm_trainable, moving, hidden, training=False)
        tensors.update({"output": np.asarray(output), "inference": np.asarray(inference),
                        "grad/x": np.asarray(gradients[2])})
        for variable, gradient in zip(conv.trainable_variables, gradients[0]):
            tensors["grad/" + variable.path] = np.asarray(gradient)
        for variable, gradient in zip(norm.trainable_variables, gradients[1]):
            tensors["grad/" + variable.path] = np.asarray(gradient)
        for variable, value in zip(norm.non_trainable_variables, moving):
            tensors["updated/" + variable.path] = np.asarray(value)
        for kind, pool in (("max", keras.ops.max_pool), ("average", keras.ops.average_pool)):
            pooled, pull = jax.vjp(lambda images: pool(images, 3, strides=2, padding="same"), x)
            pool_probe = generator.standard_normal(pooled.shape).astype(np.float32)
            tensors[f"pool/{kind}/probe"] = pool_probe
            tensors[f"pool/{kind}/output"] = np.asarray(pooled)
            tensors[f"pool/{kind}/grad"] = np.asarray(pull(pool_probe)[0])
        write_safetensors(os.path.join(directory, name + ".safetensors"), tensors)
        with open(os.path.join(directory, name + ".json"), "w") as handle:
            json.dump({"filters": filters, "kernel": list(kernel), "strides": strides, "padding": padding,
                       "dilation": dilation, "groups": groups, "use_bias": use_bias,
                       "keras": keras.__version__, "jax": jax.__version__}, handle)


if __name__ == "__main__":
    sys.exit(keras_check.main(__file__, __doc__, keras_side, [case[0] for case in CASES],
                              lambda config: [str(config["filters"]), str(config["kernel"][0]), str(config["kernel"][1]),
                                             str(config["strides"]), config["padding"], str(config["dilation"]),
                                             str(config["groups"]), "1" if config["use_bias"] else "0"]))
