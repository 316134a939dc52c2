#!/usr/bin/python3
"""Compares keras-cpp with Keras 3 on JAX (CPU), the peer a user would pick instead.

Two measurements, each interleaved round after round with ours and reported as medians:
  step           one training step of the MLP 784-1024-1024-10 (ReLU), batch 128, sparse
                 cross-entropy from logits, Adam 1e-3: ours (training_step_benchmark), a
                 hand-written jax.jit step (forward, value_and_grad, Adam, buffers donated) and
                 Keras `fit` on JAX; at 1 thread (taskset -c 0) and 2 threads (taskset -c 0,1),
                 since XLA's own thread flags do not limit its threads on this machine.
  transformer    one training step of examples/transformer_lm's byte-level GPT (4 blocks, width
                 128, 4 heads, context 128, batch 32; Keras MultiHeadAttention, pre-norm blocks,
                 GELU feed-forward): ours (transformer_step) beside the same model in Keras on
                 JAX as a jitted stateless step (model.stateless_call, jax.value_and_grad,
                 Adam's stateless_apply, buffers donated), at 1 and 2 threads; then ours on 2
                 processes, ModelParallel beside DataParallel.
  cnn            one training step of the Keras JAX guide's convnet (examples/fashion_mnist
                 --model cnn: Rescaling, three Conv2D with BatchNormalization and ReLU, global
                 average pooling, Dense 256, Dropout, Dense 10) on 28x28x1 images, batch 128:
                 ours (convnet_step) beside the same model in Keras on JAX as a jitted stateless
                 step, at 1 and 2 threads; then on 2 processes ours, DataParallel with the
                 normalisations unsynchronized and synchronized, beside Keras DataParallel's fit
                 of the same model (as in data-parallel below; its BatchNormalization sees the
                 global batch, as our synchronized one does).
  data-parallel  the same step on P processes, global batch 128: ours under mpirun
                 (data_parallel_step, with its unsynchronised step beside it) and Keras
                 DataParallel(auto_shard_dataset=False) on JAX's distributed runtime with gloo
                 CPU collectives, each process feeding its half of the batch (Keras' fit refuses
                 NumPy input under DataParallel otherwise), each process pinned to one core.

Keras and JAX come from PyPI, pinned, in a virtual environment of this script's own
(--venv, created on first use); the tests never need it.

  compare_keras_jax.py [--build DIR] [--threads 1,2] [--processes 2] [--rounds 5]
                       [--only step|data-parallel|transformer|cnn] [--venv DIR]
                       [--dtype-policy float32|mixed_bfloat16|...]
--dtype-policy runs the transformer and CNN steps under that Keras policy on both sides (ours:
the step benchmarks' --dtype-policy; Keras: keras.mixed_precision.set_global_policy).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))

PINNED = ("keras==3.15.1", "jax==0.10.2", "jaxlib==0.10.2")
DEFAULT_VENV = os.path.join(os.path.expanduser("~"), ".cache", "keras-cpp", "keras-jax-venv")
BATCH_SIZE = 128
INPUT_FEATURES = 784
HIDDEN_UNITS = 1024
CLASSES = 10
LEARNING_RATE = 1e-3


# The policy both sides run under (--dtype-policy), set once by main().
DTYPE_POLICY = ["float32"]


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build/release",
                        help="build folder holding benchmarks/ (default build/release)")
    parser.add_argument("--threads", default="1,2", help="thread counts of the step (default 1,2)")
    parser.add_argument("--processes", default="2",
                        help="process counts of the data-parallel step (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per measurement")
    parser.add_argument("--only", choices=("step", "data-parallel", "transformer", "cnn"))
    parser.add_argument("--dtype-policy", default="float32",
                        help="Keras' global dtype policy on both sides, e.g. mixed_bfloat16 (default float32)")
    parser.add_argument("--venv", default=DEFAULT_VENV,
                        help=f"virtual environment for Keras + JAX (default {DEFAULT_VENV})")
    # Internal: a child that times JAX and prints one JSON line.
    parser.add_argument("--jax-worker", choices=("jit", "fit", "data-parallel", "transformer", "cnn"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="mlp", choices=("mlp", "cnn"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()

    def counts(text, flag):
        try:
            values = [int(item) for item in text.split(",") if item]
        except ValueError:
            parser.error(f"{flag}: '{text}' is not a comma-separated list of integers")
        if not values or min(values) < 1:
            parser.error(f"{flag} needs at least one count, each at least 1")
        return values

    arguments.thread_counts = counts(arguments.threads, "--threads")
    arguments.process_counts = counts(arguments.processes, "--processes")
    if arguments.rounds < 1 or arguments.steps < 1:
        parser.error("--rounds and --steps must be at least 1")
    return arguments


# ---------------------------------------------------------------- the JAX side (in the venv)

def synthetic_batch(batch, seed):
    import numpy as np
    generator = np.random.default_rng(seed)
    inputs = generator.random((batch, INPUT_FEATURES), dtype=np.float32)
    labels = generator.integers(0, CLASSES, size=(batch,)).astype(np.int32)
    return inputs, labels


def jit_worker(steps):
    """The step as a JAX expert would write it: one jitted function, parameters donated."""
    import jax
    import jax.numpy as jnp

    sizes = [INPUT_FEATURES, HIDDEN_UNITS, HIDDEN_UNITS, CLASSES]
    keys = jax.random.split(jax.random.PRNGKey(42), len(sizes) - 1)
    params = []
    for key, (fan_in, fan_out) in zip(keys, zip(sizes[:-1], sizes[1:])):
        limit = (6.0 / (fan_in + fan_out)) ** 0.5
        params.append((jax.random.uniform(key, (fan_in, fan_out), jnp.float32, -limit, limit),
                       jnp.zeros((fan_out,), jnp.float32)))

    def loss_of(params, inputs, labels):
        hidden = inputs
        for kernel, bias in params[:-1]:
            hidden = jax.nn.relu(hidden @ kernel + bias)
        logits = hidden @ params[-1][0] + params[-1][1]
        picked = jnp.take_along_axis(logits, labels[:, None], axis=1)[:, 0]
        return jnp.mean(jax.nn.logsumexp(logits, axis=1) - picked)

    def step(params, first, second, count, inputs, labels):
        loss, gradients = jax.value_and_grad(loss_of)(params, inputs, labels)
        count = count + 1
        beta_1, beta_2, epsilon = 0.9, 0.999, 1e-7
        alpha = LEARNING_RATE * jnp.sqrt(1 - beta_2 ** count) / (1 - beta_1 ** count)
        first = jax.tree_util.tree_map(lambda m, g: m + (g - m) * (1 - beta_1), first, gradients)
        second = jax.tree_util.tree_map(lambda v, g: v + (g * g - v) * (1 - beta_2), second, gradients)
        params = jax.tree_util.tree_map(lambda w, m, v: w - alpha * m / (jnp.sqrt(v) + epsilon),
                                        params, first, second)
        return params, first, second, count, loss

    step = jax.jit(step, donate_argnums=(0, 1, 2))
    first = jax.tree_util.tree_map(jnp.zeros_like, params)
    second = jax.tree_util.tree_map(jnp.zeros_like, params)
    count = jnp.zeros((), jnp.float32)
    inputs, labels = (jnp.asarray(array) for array in synthetic_batch(BATCH_SIZE, 7))
    for _ in range(5):
        params, first, second, count, loss = step(params, first, second, count, inputs, labels)
        float(loss)
    durations = []
    for _ in range(steps):
        started = time.perf_counter()
        params, first, second, count, loss = step(params, first, second, count, inputs, labels)
        float(loss)  # as our train_on_batch, the loss is read back every step
        durations.append(time.perf_counter() - started)
    return {"ms_per_step": 1e3 * statistics.median(durations), "final_loss": float(loss)}


def keras_model():
    import keras
    keras.utils.set_random_seed(42)
    model = keras.Sequential([keras.Input((INPUT_FEATURES,)),
                              keras.layers.Dense(HIDDEN_UNITS, activation="relu"),
                              keras.layers.Dense(HIDDEN_UNITS, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def timed_fit(model, inputs, labels, batch, steps):
    """ms per step of fit over `steps` batches, after a warm-up fit that compiles the step."""
    import numpy as np
    repeated_inputs = np.concatenate([inputs] * steps)
    repeated_labels = np.concatenate([labels] * steps)
    model.fit(repeated_inputs[:batch * 3], repeated_labels[:batch * 3], batch_size=batch,
              epochs=1, verbose=0, shuffle=False)
    started = time.perf_counter()
    history = model.fit(repeated_inputs, repeated_labels, batch_size=batch, epochs=1, verbose=0,
                        shuffle=False)
    elapsed = time.perf_counter() - started
    return {"ms_per_step": 1e3 * elapsed / steps, "final_loss": float(history.history["loss"][-1])}


def fit_worker(steps):
    inputs, labels = synthetic_batch(BATCH_SIZE, 7)
    return timed_fit(keras_model(), inputs, labels, BATCH_SIZE, steps)


def data_parallel_worker(steps, process_id, processes, coordinator, model_name="mlp"):
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    import keras
    keras.distribution.initialize(job_addresses=coordinator, num_processes=processes,
                                  process_id=process_id)
    devices = keras.distribution.list_devices()
    if len(devices) != processes:
        raise SystemExit(f"Keras sees {len(devices)} devices ({devices}), expected {processes}")
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False))
    batch = CNN_BATCH if model_name == "cnn" else BATCH_SIZE
    local = batch // processes
    inputs, labels = synthetic_images(batch, 7) if model_name == "cnn" else synthetic_batch(batch, 7)
    mine = slice(process_id * local, (process_id + 1) * local)
    model = keras_convnet() if model_name == "cnn" else keras_model()
    return timed_fit(model, inputs[mine], labels[mine], local, steps)


TRANSFORMER = {"blocks": 4, "width": 128, "heads": 4, "context": 128, "batch": 32}


def transformer_worker(steps):
    """examples/transformer_lm's model in Keras, trained by a jitted stateless step."""
    import jax
    import keras
    import numpy as np

    keras.utils.set_random_seed(42)
    width, heads, context = TRANSFORMER["width"], TRANSFORMER["heads"], TRANSFORMER["context"]

    class PositionEmbedding(keras.layers.Layer):  # keras_hub.layers.PositionEmbedding's maths
        def build(self, input_shape):
            self.embeddings = self.add_weight(shape=(context, input_shape[-1]), initializer="glorot_uniform",
                                              name="embeddings")

        def call(self, inputs):
            return keras.ops.broadcast_to(self.embeddings[: keras.ops.shape(inputs)[1]], keras.ops.shape(inputs))

    tokens = keras.Input((context,), dtype="int32")
    x = keras.layers.Embedding(256, width, name="token_embedding")(tokens)
    x = x + PositionEmbedding(name="position_embedding")(x)
    for _ in range(TRANSFORMER["blocks"]):
        normed = keras.layers.LayerNormalization(epsilon=1e-5)(x)
        x = x + keras.layers.MultiHeadAttention(heads, width // heads)(normed, normed, use_causal_mask=True)
        normed = keras.layers.LayerNormalization(epsilon=1e-5)(x)
        x = x + keras.layers.Dense(width)(keras.layers.Dense(4 * width, activation="gelu")(normed))
    logits = keras.layers.Dense(256)(keras.layers.LayerNormalization(epsilon=1e-5)(x))
    model = keras.Model(tokens, logits)
    generator = np.random.default_rng(7)
    sequences = generator.integers(0, 256, size=(TRANSFORMER["batch"], context + 1)).astype(np.int32)
    inputs, labels = jax.numpy.asarray(sequences[:, :-1]), jax.numpy.asarray(sequences[:, 1:])
    seconds, loss = jitted_steps(model, inputs, labels, steps)
    milliseconds = 1e3 * seconds
    return {"ms_per_step": milliseconds, "final_loss": float(loss),
            "tokens_per_second": TRANSFORMER["batch"] * context / milliseconds * 1e3}


CNN_BATCH = 128


def jitted_steps(model, inputs, labels, steps):
    """Median seconds of a jitted stateless training step (forward, value_and_grad, Adam's
    stateless_apply, buffers donated) of a built Keras model, after 3 warm-up steps."""
    import jax
    import keras

    optimizer = keras.optimizers.Adam(LEARNING_RATE)
    optimizer.build(model.trainable_variables)
    loss_function = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def compute_loss(trainable, non_trainable, inputs, labels):
        predictions, non_trainable = model.stateless_call(trainable, non_trainable, inputs, training=True)
        return loss_function(labels, predictions), non_trainable

    gradient_of = jax.value_and_grad(compute_loss, has_aux=True)

    def step(state, inputs, labels):
        trainable, non_trainable, optimizer_variables = state
        (loss, non_trainable), gradients = gradient_of(trainable, non_trainable, inputs, labels)
        trainable, optimizer_variables = optimizer.stateless_apply(optimizer_variables, gradients, trainable)
        return loss, (trainable, non_trainable, optimizer_variables)

    step = jax.jit(step, donate_argnums=(0,))
    state = ([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables],
             [v.value for v in optimizer.variables])
    for _ in range(3):
        loss, state = step(state, inputs, labels)
        float(loss)
    durations = []
    for _ in range(steps):
        started = time.perf_counter()
        loss, state = step(state, inputs, labels)
        float(loss)
        durations.append(time.perf_counter() - started)
    return statistics.median(durations), float(loss)


def keras_convnet():
    """The Keras JAX guide's convnet, as examples/fashion_mnist/guide_convnet.h builds it."""
    import keras

    keras.utils.set_random_seed(42)
    inputs = keras.Input((28, 28, 1))
    x = keras.layers.Rescaling(1.0 / 255.0)(inputs)
    x = keras.layers.Conv2D(12, 3, padding="same", use_bias=False)(x)
    x = keras.layers.BatchNormalization(scale=False, center=True)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(24, 6, use_bias=False, strides=2)(x)
    x = keras.layers.BatchNormalization(scale=False, center=True)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(32, 6, padding="same", strides=2, name="large_k")(x)
    x = keras.layers.BatchNormalization(scale=False, center=True)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(256, activation="relu")(x)
    x = keras.layers.Dropout(0.5)(x)
    model = keras.Model(inputs, keras.layers.Dense(10)(x))
    model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def synthetic_images(batch, seed):
    import numpy as np
    generator = np.random.default_rng(seed)
    return (generator.uniform(0, 255, size=(batch, 28, 28, 1)).astype(np.float32),
            generator.integers(0, 10, size=(batch,)).astype(np.int32))


def cnn_worker(steps):
    import jax
    images, labels = synthetic_images(CNN_BATCH, 7)
    seconds, loss = jitted_steps(keras_convnet(), jax.numpy.asarray(images), jax.numpy.asarray(labels), steps)
    return {"ms_per_step": 1e3 * seconds, "final_loss": loss, "images_per_second": CNN_BATCH / seconds}


def run_worker(arguments):
    if arguments.jax_worker in ("transformer", "cnn"):  # the steps that take --dtype-policy on our side
        import keras
        keras.mixed_precision.set_global_policy(arguments.dtype_policy)
    if arguments.jax_worker == "jit":
        result = jit_worker(arguments.steps)
    elif arguments.jax_worker == "transformer":
        result = transformer_worker(arguments.steps)
    elif arguments.jax_worker == "cnn":
        result = cnn_worker(arguments.steps)
    elif arguments.jax_worker == "fit":
        result = fit_worker(arguments.steps)
    else:
        result = data_parallel_worker(arguments.steps, arguments.process_id,
                                      arguments.process_counts[0], arguments.coordinator, arguments.model)
    import jax
    import keras
    result.update(jax=jax.__version__, keras=keras.__version__)
    print(json.dumps(result), flush=True)


# ---------------------------------------------------------------- the driver (system Python)

def ensure_venv(path):
    python = os.path.join(path, "bin", "python")
    check = [python, "-c", "import keras, jax; print(keras.__version__, jax.__version__)"]
    wanted = " ".join(requirement.split("==")[1] for requirement in PINNED[:2])
    if os.access(python, os.X_OK):
        found = subprocess.run(check, capture_output=True, text=True, env=jax_environment(1))
        if found.returncode == 0 and found.stdout.strip() == wanted:
            return python
    print(f"installing {' '.join(PINNED)} into {path} (first use only) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    subprocess.run([python, "-m", "pip", "install", "--quiet", *PINNED], check=True)
    return python


def pinned(cores, command):
    return ["taskset", "-c", cores, *command]


def cores_for(threads):
    return ",".join(str(core) for core in range(threads))


def jax_environment(threads):
    environment = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
                       TF_CPP_MIN_LOG_LEVEL="3")
    # Not enough on its own here (XLA starts its threads anyway): taskset does the limiting.
    environment["XLA_FLAGS"] = (f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} "
                                f"intra_op_parallelism_threads={threads}")
    return environment


def last_json(result, what):
    if result.returncode != 0:
        sys.exit(f"{what} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    for line in reversed(result.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    sys.exit(f"{what} printed no JSON result:\n{result.stdout[-3000:]}")


def measure_jax(python, worker, threads, steps):
    command = [python, os.path.abspath(__file__), "--jax-worker", worker, "--steps", str(steps),
               "--dtype-policy", DTYPE_POLICY[0]]
    result = subprocess.run(pinned(cores_for(threads), command), env=jax_environment(threads),
                            capture_output=True, text=True)
    return last_json(result, f"JAX {worker} worker")


def measure_our_step(build, threads):
    binary = os.path.join(build, "benchmarks", "training_step_benchmark")
    command = [binary, "--benchmark_format=json", f"--benchmark_filter=BM_TrainingStep/batch:{BATCH_SIZE}/on_gpu:0/",
               "--benchmark_min_time=1.0", "--benchmark_repetitions=3",
               "--benchmark_report_aggregates_only=true"]
    result = subprocess.run(pinned(cores_for(threads), command),
                            env=dict(os.environ, KERAS_NUM_THREADS=str(threads)),
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{binary} failed ({result.returncode}):\n{result.stderr}")
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    for entry in json.loads(result.stdout)["benchmarks"]:
        if entry.get("aggregate_name") == "median":
            return {"ms_per_step": entry["real_time"] * scale[entry["time_unit"]]}
    sys.exit(f"no median in the output of {binary}")


def measure_our_data_parallel(build, processes, steps):
    binary = os.path.join(build, "benchmarks", "data_parallel_step")
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(processes),
               "--bind-to", "core", "-x", "KERAS_NUM_THREADS=1", binary, "--json",
               "--steps", str(steps)]
    return last_json(subprocess.run(command, capture_output=True, text=True), "data_parallel_step")


def measure_keras_data_parallel(python, processes, steps, model="mlp"):
    from pick_port import pick_port
    coordinator = f"127.0.0.1:{pick_port(1)}"
    children = []
    for process_id in range(processes):
        command = [python, os.path.abspath(__file__), "--jax-worker", "data-parallel",
                   "--steps", str(steps), "--process-id", str(process_id),
                   "--processes", str(processes), "--coordinator", coordinator, "--model", model]
        core = str(process_id % (os.cpu_count() or 1))
        children.append(subprocess.Popen(pinned(core, command), env=jax_environment(1),
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for child in children:
        try:
            stdout, stderr = child.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for other in children:
                other.kill()
            sys.exit("Keras DataParallel workers still ran after 600 s")
        results.append(last_json(subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr),
                                 "Keras DataParallel worker"))
    return {"ms_per_step": max(result["ms_per_step"] for result in results), **results[0]}


def transformer_flags():
    return ["--blocks", str(TRANSFORMER["blocks"]), "--width", str(TRANSFORMER["width"]), "--heads",
            str(TRANSFORMER["heads"]), "--context", str(TRANSFORMER["context"]), "--batch-size",
            str(TRANSFORMER["batch"])]


def measure_our_transformer(build, threads, steps):
    binary = os.path.join(build, "benchmarks", "transformer_step")
    command = [binary, "--json", "--only", "none", "--steps", str(steps), *transformer_flags(), "--dtype-policy", DTYPE_POLICY[0]]
    result = subprocess.run(pinned(cores_for(threads), command),
                            env=dict(os.environ, KERAS_NUM_THREADS=str(threads)), capture_output=True, text=True)
    return last_json(result, "transformer_step")


def measure_our_transformer_processes(build, processes, steps):
    binary = os.path.join(build, "benchmarks", "transformer_step")
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(processes), "--bind-to", "core",
               "-x", "KERAS_NUM_THREADS=1", binary, "--json", "--steps", str(steps), *transformer_flags(), "--dtype-policy", DTYPE_POLICY[0]]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"transformer_step under mpirun failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def measure_our_cnn(build, threads, steps):
    binary = os.path.join(build, "benchmarks", "convnet_step")
    command = [binary, "--json", "--steps", str(steps), "--batch-size", str(CNN_BATCH), "--dtype-policy", DTYPE_POLICY[0]]
    result = subprocess.run(pinned(cores_for(threads), command),
                            env=dict(os.environ, KERAS_NUM_THREADS=str(threads)), capture_output=True, text=True)
    return last_json(result, "convnet_step")


def measure_our_cnn_processes(build, processes, steps):
    binary = os.path.join(build, "benchmarks", "convnet_step")
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(processes), "--bind-to", "core",
               "-x", "KERAS_NUM_THREADS=1", binary, "--json", "--steps", str(steps), "--batch-size", str(CNN_BATCH), "--dtype-policy", DTYPE_POLICY[0]]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"convnet_step under mpirun failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def compare_model(arguments, python, label, steps, measure_ours, worker, measure_ours_processes, items, unit,
                  keras_data_parallel=None):
    """One model's step, ours beside Keras+JAX's jitted step, interleaved; then ours on the
    process counts (each mode the binary times), beside Keras DataParallel's fit of
    `keras_data_parallel` when given, interleaved. `items` per step (tokens, images) per second."""
    rows = []
    roof_name = "FMA"  # the benchmark names the roof it measured ("AVX-512 FMA")
    for threads in arguments.thread_counts:
        ours, jax_times, utilisation = [], [], []
        for round_index in range(arguments.rounds):
            for which in (("ours", "jax") if round_index % 2 == 0 else ("jax", "ours")):
                if which == "ours":
                    result = measure_ours(arguments.build, threads, steps)
                    ours.append(result["step_ms"])
                    utilisation.append(result["mfu"])
                    roof_name = result.get("fma_roof", roof_name)
                else:
                    jax_times.append(measure_jax(python, worker, threads, steps)["ms_per_step"])
            print(f"  {label}, {threads} thread(s), round {round_index + 1}: ours {ours[-1]:.2f} ms "
                  f"(MFU {100 * utilisation[-1]:.0f}%), Keras+JAX jitted {jax_times[-1]:.2f} ms", flush=True)
        rows.append((threads, median(ours), median(jax_times), median(utilisation)))
    print_markdown(["threads", "keras-cpp ms/step", f"{unit}/s", f"MFU ({roof_name} roof)", "Keras+JAX jitted ms/step",
                    "ours / Keras+JAX"],
                   [[f"{threads}", f"{ours:.2f}", f"{items / ours * 1e3:.0f}", f"{100 * mfu:.0f}%",
                     f"{jax_ms:.2f}", f"{ours / jax_ms:.2f}"] for threads, ours, jax_ms, mfu in rows])
    for processes in arguments.process_counts:
        by_mode = {}
        for _ in range(arguments.rounds):
            for result in measure_ours_processes(arguments.build, processes, steps):
                by_mode.setdefault(result["mode"], []).append(result["step_ms"])
            if keras_data_parallel:
                by_mode.setdefault("Keras DataParallel (JAX, gloo; fit)", []).append(
                    measure_keras_data_parallel(python, processes, steps, keras_data_parallel)["ms_per_step"])
        print_markdown(["processes", "mode", "keras-cpp ms/step", f"{unit}/s"],
                       [[f"{processes}", mode, f"{median(times):.2f}", f"{items / median(times) * 1e3:.0f}"]
                        for mode, times in by_mode.items()])


def print_markdown(header, rows):
    """A table as README.md holds them."""
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()


def median(values):
    return statistics.median(values)


def compare_step(arguments, python):
    rows = []
    for threads in arguments.thread_counts:
        ours, jit, fit = [], [], []
        for round_index in range(arguments.rounds):
            order = ["ours", "jit", "fit"]
            if round_index % 2:
                order.reverse()
            for which in order:
                if which == "ours":
                    ours.append(measure_our_step(arguments.build, threads)["ms_per_step"])
                elif which == "jit":
                    jit.append(measure_jax(python, "jit", threads, arguments.steps)["ms_per_step"])
                else:
                    fit.append(measure_jax(python, "fit", threads, arguments.steps)["ms_per_step"])
            print(f"  step, {threads} thread(s), round {round_index + 1}: ours {ours[-1]:.2f} ms, "
                  f"jax.jit {jit[-1]:.2f} ms, Keras fit {fit[-1]:.2f} ms", flush=True)
        rows.append((threads, median(ours), median(jit), median(fit)))
    print_markdown(["threads", "keras-cpp ms/step", "jax.jit ms/step", "Keras fit (JAX) ms/step",
                    "ours / jax.jit", "ours / Keras fit"],
                   [[f"{threads}", f"{ours:.2f}", f"{jit:.2f}", f"{fit:.2f}", f"{ours / jit:.2f}",
                     f"{ours / fit:.2f}"] for threads, ours, jit, fit in rows])


def compare_data_parallel(arguments, python):
    rows = []
    for processes in arguments.process_counts:
        ours, unsynchronised, keras_times = [], [], []
        for round_index in range(arguments.rounds):
            for which in (("ours", "keras") if round_index % 2 == 0 else ("keras", "ours")):
                if which == "ours":
                    result = measure_our_data_parallel(arguments.build, processes, arguments.steps)
                    ours.append(result["step_ms"])
                    unsynchronised.append(result["step_without_sync_ms"])
                else:
                    keras_times.append(measure_keras_data_parallel(python, processes,
                                                                   arguments.steps)["ms_per_step"])
            print(f"  data-parallel, {processes} processes, round {round_index + 1}: ours "
                  f"{ours[-1]:.2f} ms ({unsynchronised[-1]:.2f} unsynchronised), Keras DataParallel "
                  f"{keras_times[-1]:.2f} ms", flush=True)
        rows.append((processes, median(ours), median(unsynchronised), median(keras_times)))
    print_markdown(["processes", "keras-cpp ms/step", "unsynchronised ms/step", "exposed comm",
                    "ours / unsynchronised", "Keras DataParallel (JAX) ms/step", "Keras / ours"],
                   [[f"{processes}", f"{ours:.2f}", f"{alone:.2f}", f"{100 * (ours - alone) / ours:.0f}%",
                     f"{ours / alone:.2f}", f"{keras_ms:.2f}", f"{keras_ms / ours:.2f}x"]
                    for processes, ours, alone, keras_ms in rows])


def main():
    arguments = parse_arguments()
    DTYPE_POLICY[0] = arguments.dtype_policy
    if arguments.jax_worker:
        run_worker(arguments)
        return
    for name in ("training_step_benchmark", "data_parallel_step", "transformer_step", "convnet_step"):
        path = os.path.join(arguments.build, "benchmarks", name)
        if not os.access(path, os.X_OK):
            sys.exit(f"{path} is not an executable: build the benchmarks into --build first")
    python = ensure_venv(arguments.venv)
    versions = subprocess.run([python, "-c", "import keras, jax; print(keras.__version__, jax.__version__)"],
                              capture_output=True, text=True, env=jax_environment(1)).stdout.split()
    print(f"Keras {versions[0]} on JAX {versions[1]}; {os.cpu_count()} CPUs; {arguments.rounds} "
          f"interleaved rounds, medians; MLP batch {BATCH_SIZE}; the transformer and CNN steps under the "
          f"{arguments.dtype_policy} policy on both sides", flush=True)
    if arguments.only in (None, "step"):
        compare_step(arguments, python)
    if arguments.only in (None, "data-parallel"):
        compare_data_parallel(arguments, python)
    if arguments.only in (None, "transformer"):
        compare_model(arguments, python, "transformer", max(5, arguments.steps // 3), measure_our_transformer,
                      "transformer", measure_our_transformer_processes,
                      TRANSFORMER["batch"] * TRANSFORMER["context"], "tokens")
    if arguments.only in (None, "cnn"):
        compare_model(arguments, python, "cnn", arguments.steps, measure_our_cnn, "cnn", measure_our_cnn_processes,
                      CNN_BATCH, "images", keras_data_parallel="cnn")


if __name__ == "__main__":
    main()
