#!/usr/bin/python3
"""keras-cpp's MultiHeadAttention against Keras 3's on JAX: the same weights (copied through a
safetensors file), inputs and masks give the same outputs and the same gradients (of the
inputs and of every weight, for loss = sum(output * probe)) within 1e-5.

Keras and JAX come from the virtual environment of benchmarks/compare_keras_jax.py
(KERAS_JAX_VENV, default ~/.cache/keras-cpp/keras-jax-venv); without it the check is skipped
(exit 77): the tests never install anything.

  check_keras_attention.py ATTENTION_TOOL
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_check  # noqa: E402
from keras_check import write_safetensors  # noqa: E402


# (name, heads, key_dim, value_dim, batch, T, S, width, mask, causal)
CASES = [
    # value_dim == key_dim: Keras 3.15 on JAX fails on others (its fused path reshapes by key_dim).
    ("cross_attention_with_a_padding_mask", 2, 3, 3, 2, 4, 5, 6, True, False),
    ("self_attention_causal", 3, 2, 2, 2, 5, 5, 6, False, True),
    ("self_attention_causal_and_masked", 2, 4, 4, 1, 6, 6, 8, True, True),
]


def keras_side(directory):
    """Runs in the venv: writes one file per case with weights, inputs and Keras' answers."""
    os.environ["KERAS_BACKEND"] = "jax"
    import jax
    import keras
    import numpy as np

    generator = np.random.default_rng(5)
    for name, heads, key_dim, value_dim, batch, targets, sources, width, masked, causal in CASES:
        keras.utils.set_random_seed(1)
        attention = keras.layers.MultiHeadAttention(heads, key_dim, value_dim=value_dim, name="mha")
        query = generator.standard_normal((batch, targets, width)).astype(np.float32)
        value = query if causal else generator.standard_normal((batch, sources, width)).astype(np.float32)
        attention(query, value)
        for variable in attention.weights:  # biases too, so that they are checked
            variable.assign(generator.standard_normal(variable.shape).astype(np.float32) * 0.5)
        mask = np.ones((batch, targets, sources), np.float32)
        if masked:
            mask[:, :, -2:] = 0.0
            mask[0, 0, 0] = 1.0
            mask[:, :, 0] = 1.0  # every query keeps at least one key
        probe = generator.standard_normal((batch, targets, width)).astype(np.float32)
        trainable = [variable.value for variable in attention.trainable_variables]

        def loss_of(trainable, query, value):
            # Self-attention passes the query as the value too, so that its gradient has both paths.
            output, _ = attention.stateless_call(trainable, [], query, query if causal else value,
                                                 attention_mask=mask.astype(bool) if masked else None,
                                                 use_causal_mask=causal)
            return (output * probe).sum(), output

        (_, output), gradients = jax.value_and_grad(loss_of, argnums=(0, 1, 2), has_aux=True)(
            trainable, query, value)
        tensors = {"query": query, "value": value, "mask": mask, "probe": probe, "output": np.asarray(output),
                   "grad/query": np.asarray(gradients[1])}
        if not causal:
            tensors["grad/value"] = np.asarray(gradients[2])
        for variable, gradient in zip(attention.trainable_variables, gradients[0]):
            tensors[variable.path] = np.asarray(variable.value)
            tensors["grad/" + variable.path] = np.asarray(gradient)
        write_safetensors(os.path.join(directory, name + ".safetensors"), tensors)
        with open(os.path.join(directory, name + ".json"), "w") as handle:
            json.dump({"heads": heads, "key_dim": key_dim, "value_dim": value_dim, "masked": masked,
                       "causal": causal, "keras": keras.__version__, "jax": jax.__version__}, handle)


if __name__ == "__main__":
    sys.exit(keras_check.main(__file__, __doc__, keras_side, [case[0] for case in CASES],
                              lambda config: [str(config["heads"]), str(config["key_dim"]), str(config["value_dim"]),
                                             "1" if config["masked"] else "0", "1" if config["causal"] else "0"]))
