"""companion.optimizers._wrappers: TransformGradients and Lookahead, alone, under loss scaling and
under MirroredStrategy."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.optimizer_helpers import fitted
from helpers.small_models import CHILD_ENV, max_difference

from companion.optimizers import (
    AdamW,
    ClipGlobalNorm,
    Lookahead,
    TaskWeights,
    TransformGradients,
)


def test_overriding_get_gradients_is_silently_ignored_in_keras_3():
    class Clipped(keras.optimizers.SGD):
        def get_gradients(self, loss, params):  # the Keras 2 hook of the article
            raise AssertionError("never called")

    variable = keras.Variable([0.0])
    Clipped(1.0).apply_gradients([(keras.ops.array([100.0]), variable)])
    assert float(variable.numpy()[0]) == -100.0  # no clipping happened, and no error either


def test_lookahead_matches_a_numpy_reference():
    gradients = np.random.default_rng(2).normal(size=(10, 3)).astype("float32")
    variable = keras.Variable(np.zeros(3, "float32"))
    optimizer = Lookahead(keras.optimizers.SGD(0.1), sync_period=4, slow_step_size=0.25)
    fast, slow = np.zeros(3), np.zeros(3)
    for t, g in enumerate(gradients, start=1):
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(g), variable)])
        fast = fast - 0.1 * g
        if t % 4 == 0:
            slow = slow + 0.25 * (fast - slow)
            fast = slow.copy()
        np.testing.assert_allclose(variable.numpy(), fast, rtol=1e-5, atol=1e-6)
    assert Lookahead.from_config(optimizer.get_config()).get_config() == optimizer.get_config()


MIRRORED = """
from companion.notebook import split_cpu
split_cpu(2)
import numpy as np, tensorflow as tf, keras
from helpers import optimizer_helpers as t
from helpers import small_models as s
from companion.training import fit
from companion.optimizers import ClipGlobalNorm, TransformGradients
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
x, y, data = s.regressor_data()
for name in ["composed"]:  # AdamW inside TransformGradients inside Lookahead
    make = t.make_optimizers()[name]
    single = s.regressor()
    single.compile(make(), "mse")
    single.fit(data, epochs=2, verbose=0, shuffle=False)
    with strategy.scope():
        model = s.regressor()
        model.compile(make(), "mse")
    model.fit(data, epochs=2, verbose=0, shuffle=False)
    with strategy.scope():
        custom, optimizer = s.regressor(), make()
    fit(custom, data, optimizer=optimizer, loss=keras.losses.MeanSquaredError(reduction=None),
        epochs=2, strategy=strategy, progress=False)
    for trained, used in ((model, model.optimizer), (custom, optimizer)):
        variables = trained.variables + used.variables
        replicas = max(float(np.max(np.abs(v.value.values[0].numpy() - v.value.values[1].numpy())))
                       for v in variables)
        print(name, len(variables), replicas, s.max_difference(trained, single) < 1e-5)
# Global clipping on two replicas whose gradients are orthogonal: Keras clips each replica's part
x2, y2 = np.array([[100.0, 0.0], [0.0, 100.0]], "float32"), np.zeros((2, 1), "float32")
pair = tf.data.Dataset.from_tensor_slices((x2, y2)).batch(2)
norms = []
for make in (lambda: keras.optimizers.SGD(1.0, global_clipnorm=1.0),
             lambda: TransformGradients(keras.optimizers.SGD(1.0), [ClipGlobalNorm(1.0)])):
    with strategy.scope():
        dense = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
        linear = keras.Sequential([keras.Input((2,)), dense])
        linear.compile(make(), "mse")
    linear.fit(pair, epochs=1, verbose=0)
    norms.append(float(np.linalg.norm(linear.get_weights()[0] - 1.0)))
print("clip", *norms)
"""


@pytest.mark.slow
def test_mirrored_strategy_replicas_agree_match_one_device_and_clip_the_global_gradient():
    from companion.notebook import run_python

    result = run_python(MIRRORED, env=CHILD_ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    *lines, clip = result.stdout.splitlines()[-3:]
    assert [line.split()[0] for line in lines] == ["composed"] * 2
    for line in lines:
        _, count, replicas, close = line.split()
        assert int(count) > 10 and float(replicas) == 0.0 and close == "True"
    # Keras's global_clipnorm clips each replica's part (sqrt 2); ClipGlobalNorm clips the sum (1)
    _, keras_norm, ours = clip.split()
    assert float(keras_norm) == pytest.approx(2**0.5, abs=1e-4) and float(ours) == pytest.approx(
        1.0, abs=1e-5
    )


def test_transforms_refuse_a_string():
    with pytest.raises(
        TypeError, match=r"^transforms: expected a list or tuple of GradientTransform"
    ):
        TransformGradients(AdamW(), "")


@pytest.mark.parametrize(
    "make",
    [
        lambda name: Lookahead(AdamW(), name=name),
        lambda name: TransformGradients(AdamW(), name=name),
    ],
)
def test_wrapper_names_are_checked(make):
    with pytest.raises(TypeError, match=r"^name: expected a non-empty str or None, got int 3"):
        make(3)
    with pytest.raises(
        ValueError, match=r"^name: expected a non-empty str or None, got an empty str"
    ):
        make("")


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: AdamW(0.01, **kw),
        lambda **kw: TransformGradients(
            AdamW(0.01, **kw), [TaskWeights({"layer_normalization": 0.5})]
        ),
        lambda **kw: Lookahead(AdamW(0.01, **kw), sync_period=3),
    ],
    ids=["AdamW", "TransformGradients", "Lookahead"],
)
def test_loss_scale_factor_gives_the_same_weights_as_no_scaling(make):
    """fit scales the loss by 1024 and the optimizer divides the gradients by it: exact for a
    power of two. Wrappers pass scale_loss on to the optimizer they hold (without that, fit did
    not scale and the gradients came out 1024 times too small)."""
    scaled = make(loss_scale_factor=1024.0)
    assert float(scaled.scale_loss(tf.constant(1.0))) == 1024.0
    assert max_difference(fitted(make()), fitted(scaled)) == 0.0


def test_transforms_see_the_unscaled_gradient():
    clipped = TransformGradients(keras.optimizers.SGD(0.01), [ClipGlobalNorm(1.0)])
    scaled = TransformGradients(
        keras.optimizers.SGD(0.01, loss_scale_factor=1024.0), [ClipGlobalNorm(1.0)]
    )
    a, b = fitted(clipped), fitted(scaled)
    assert float(clipped.transforms[0].norm) == pytest.approx(float(scaled.transforms[0].norm))
    assert float(scaled.transforms[0].norm) > 1.0  # the clip was active
    # exact outside fit (eager and tf.function); inside fit's step at most a float32 rounding
    assert max_difference(a, b) <= 1e-7


@pytest.mark.parametrize(
    "make, error, match",
    [
        (
            lambda: Lookahead("adam"),
            TypeError,
            r"^optimizer: expected a keras.optimizers.Optimizer",
        ),
        (
            lambda: Lookahead(AdamW(), sync_period=0),
            ValueError,
            r"^sync_period: expected an int >= 1",
        ),
        (
            lambda: TransformGradients(AdamW(), ClipGlobalNorm(1.0)),
            TypeError,
            r"^transforms: expected a list or tuple",
        ),
    ],
)
def test_bad_input_is_rejected_naming_the_argument_wrappers(make, error, match):
    with pytest.raises(error, match=match):
        make()
