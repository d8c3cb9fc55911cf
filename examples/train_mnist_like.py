"""A small, real TensorFlow training job: an MNIST-shaped CNN on synthetic data.

Runs in a few seconds on a CPU. It knows nothing about tfprof; run it under
``tfprof-agent run`` to profile it. It prints its median step time so that runs with
and without the profiler can be compared (bench/overhead.py does).

    python examples/train_mnist_like.py [--steps N] [--batch-size B] [--exit-code C] [--fit]

By default it trains with its own loop (a ``tf.function`` step); ``--fit`` trains the same
model with Keras's ``Model.fit``, as most Keras jobs do (one epoch of N steps).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="training steps (default: 60)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exit-code", type=int, default=0, help="exit with this code at the end")
    parser.add_argument(
        "--threads", type=int, default=0, help="TensorFlow op threads (default: 0, all cores)"
    )
    parser.add_argument("--fit", action="store_true", help="train with Keras's Model.fit")
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.random.set_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    images = rng.random((args.batch_size * 8, 28, 28, 1), dtype=np.float32)
    labels = rng.integers(0, 10, size=(args.batch_size * 8,))
    data = (
        tf.data.Dataset.from_tensor_slices((images, labels))
        .shuffle(len(images), seed=args.seed)
        .batch(args.batch_size)
        .repeat()
    )

    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(16, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    optimizer = tf.keras.optimizers.Adam(1e-3)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if args.fit:
        model.compile(optimizer=optimizer, loss=loss_fn)
        history = model.fit(data, epochs=1, steps_per_epoch=args.steps, verbose=0)
        loss = history.history["loss"][-1]
        print(f"done: {args.steps} steps with fit, final loss {loss:.4f}", flush=True)
        return int(args.exit_code)

    def eager_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    train_step = tf.function(eager_step)
    step_ms = []
    loss = float("nan")
    for step, (x, y) in enumerate(data.take(args.steps)):
        t0 = time.perf_counter()
        loss = float(train_step(x, y))
        step_ms.append((time.perf_counter() - t0) * 1e3)
        if step % 20 == 0:
            print(f"step {step:4d}  loss {loss:.4f}", flush=True)
    # The first steps trace and compile the function; they are not steady state.
    steady = step_ms[min(5, len(step_ms) - 1) :]
    print(
        f"done: {args.steps} steps, final loss {loss:.4f}, "
        f"median step {statistics.median(steady):.3f} ms",
        flush=True,
    )
    return int(args.exit_code)


if __name__ == "__main__":
    sys.exit(main())
