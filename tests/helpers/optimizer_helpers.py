"""What the optimizer tests share: a small model, its data, a trajectory of weights, the
optimizers every round trip covers, one transform applied once."""

import keras
import numpy as np
import tensorflow as tf

from companion.optimizers import (
    AdamW,
    ClipGlobalNorm,
    GaussianNoise,
    Lookahead,
    TopK,
    TransformGradients,
)
from helpers.small_models import regressor, regressor_data


def trajectory(optimizer, steps=100, seed=0):
    """Weights after each of ``steps`` manual steps (MSE on a fixed batch) with ``optimizer``."""
    model = regressor(seed)
    x, y, _ = regressor_data()
    optimizer.build(model.trainable_variables)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = keras.losses.MeanSquaredError()(y, model(x))
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )

    path = []
    for _ in range(steps):
        step()
        path.append(np.concatenate([w.ravel() for w in model.get_weights()]))
    return np.array(path)


def make_optimizers():
    """AdamW alone, and every wrapper at once: Lookahead around transforms around AdamW."""
    return {
        "adamw": lambda: AdamW(0.01),
        "composed": lambda: Lookahead(
            TransformGradients(
                AdamW(0.01),
                [ClipGlobalNorm(5.0), GaussianNoise(0.01, seed=1), TopK(0.5)],
                record_update_norms=True,
            ),
            sync_period=3,
        ),
    }


def apply_once(transform, gradients, variables=None, optimizer=None):
    variables = variables or [
        keras.Variable(np.zeros(np.shape(g), "float32"), name=f"v{i}")
        for i, g in enumerate(gradients)
    ]
    wrapper = TransformGradients(optimizer or keras.optimizers.SGD(1.0), [transform])
    before = [v.numpy().copy() for v in variables]
    wrapper.apply_gradients(
        [
            (keras.ops.convert_to_tensor(np.asarray(g, "float32")), v)
            for g, v in zip(gradients, variables)
        ]
    )
    return [
        b - v.numpy() for b, v in zip(before, variables)
    ], wrapper  # the applied gradients (SGD, lr 1)


F32_MAX = float(np.finfo("float32").max)


def fitted(optimizer, epochs=2):
    _, _, data = regressor_data()
    model = regressor()
    model.compile(optimizer, "mse")
    model.fit(data, epochs=epochs, verbose=0, shuffle=False)
    return model
