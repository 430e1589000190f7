import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from companion.data import make_shapes
from companion.layers import ResidualBlock
from companion.models import (
    MultiModalModel,
    copy_weights,
    functional_multimodal,
    image_branch,
    meta_branch,
)

SHAPES = {"image": (None, 16, 16, 3), "meta": (None, 4)}


@pytest.fixture(scope="module")
def data():
    (images, meta), labels = make_shapes(32, image_size=16, meta_dim=4, seed=3)
    return {"image": images, "meta": meta}, labels


def _pair(seed=0):
    keras.utils.set_random_seed(seed)
    functional = functional_multimodal((16, 16, 3), meta_dim=4, num_classes=6)
    subclass = MultiModalModel(6)
    subclass.build(SHAPES)
    return functional, subclass


def _closed_form_params(
    image_shape,
    meta_dim,
    num_classes,
    filters=(16, 32),
    image_units=32,
    meta_units=(16, 16),
    fused_units=64,
):
    channels = image_shape[-1]
    image = (
        (9 * channels + 1) * filters[0]
        + (9 * filters[0] + 1) * filters[1]
        + (filters[1] + 1) * image_units
    )
    meta = (meta_dim + 1) * meta_units[0] + (meta_units[0] + 1) * meta_units[1]
    width = image_units + meta_units[1]
    fusion = (width + 1) * fused_units + (fused_units + 1) * fused_units
    fusion += width * fused_units if width != fused_units else 0  # projection, no bias
    return image + meta + fusion + (fused_units + 1) * num_classes


# ---------------------------------------------------------------- same model, three APIs


@pytest.mark.parametrize("fused_units", [64, 48])
def test_functional_and_subclass_have_the_closed_form_parameter_count(fused_units):
    functional = functional_multimodal((16, 16, 3), 4, 6, fused_units=fused_units)
    subclass = MultiModalModel(6, fused_units=fused_units)
    subclass.build(SHAPES)
    expected = _closed_form_params((16, 16, 3), 4, 6, fused_units=fused_units)
    assert functional.count_params() == subclass.count_params() == expected
    assert (subclass.fusion.projection is None) == (fused_units == 48)


def test_subclass_weights_exist_right_after_build_before_any_call():
    model = MultiModalModel(6)
    assert not model.weights
    model.build(SHAPES)
    assert model.built and len(model.weights) == 17
    model.set_weights([np.zeros(w.shape, "float32") for w in model.weights])  # set_weights works


def test_copying_weights_gives_identical_outputs_both_ways(data):
    inputs, _ = data
    functional, subclass = _pair()
    assert copy_weights(functional, subclass) == [
        "image_branch",
        "meta_branch",
        "fusion",
        "classifier",
    ]
    np.testing.assert_array_equal(subclass(inputs), functional(inputs))
    other = functional_multimodal((16, 16, 3), 4, 6)
    copy_weights(subclass, other)
    np.testing.assert_array_equal(other(inputs), functional(inputs))


def test_outputs_are_probabilities_and_agree_with_an_independent_forward_pass(data):
    inputs, _ = data
    functional, _ = _pair()
    probabilities = np.asarray(functional(inputs))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    # Rebuild the forward pass from the parts: branches, concatenation, residual block, softmax.
    features = np.concatenate(
        [
            functional.get_layer("image_branch")(inputs["image"]),
            functional.get_layer("meta_branch")(inputs["meta"]),
        ],
        axis=1,
    )
    block = functional.get_layer("fusion")
    hidden = np.maximum(features @ block.hidden.kernel.numpy() + block.hidden.bias.numpy(), 0)
    fused = hidden @ block.output_dense.kernel.numpy() + block.output_dense.bias.numpy()
    fused += features @ block.projection.kernel.numpy()
    kernel, bias = functional.get_layer("classifier").get_weights()
    logits = fused @ kernel + bias
    reference = np.exp(logits - logits.max(axis=1, keepdims=True))
    reference /= reference.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probabilities, reference, atol=1e-5)


def test_inputs_as_dict_or_pair_and_under_tf_function(data):
    inputs, _ = data
    functional, subclass = _pair()
    copy_weights(functional, subclass)
    pair = [inputs["image"], inputs["meta"]]
    expected = np.asarray(functional(inputs))
    for model in (functional, subclass):
        np.testing.assert_array_equal(model(pair), expected)
        np.testing.assert_allclose(tf.function(model)(inputs), expected, atol=1e-6)


def test_both_models_train_on_a_tf_data_dataset(data):
    inputs, labels = data
    dataset = tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(8)
    for model in _pair():
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.SparseCategoricalCrossentropy()
        )
        losses = model.fit(dataset, epochs=3, verbose=0, shuffle=False).history["loss"]
        assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_branches_are_sequential_with_named_layers():
    branch = image_branch((16, 16, 3), filters=(4, 8), units=5)
    assert isinstance(branch, keras.Sequential) and branch.output_shape == (None, 5)
    assert [layer.name for layer in branch.layers] == [
        "conv_1",
        "pool",
        "conv_2",
        "global_pool",
        "image_features",
    ]
    meta = meta_branch(4, units=(6, 3))
    assert isinstance(meta, keras.Sequential) and meta.output_shape == (None, 3)
    assert meta.count_params() == (4 + 1) * 6 + (6 + 1) * 3
    assert not image_branch(None).built and not meta_branch(None).built


def test_functional_model_graph_and_intermediate_output(data):
    inputs, _ = data
    model = functional_multimodal((16, 16, 3), 4, 6)
    assert [t.name for t in model.inputs] == ["image", "meta"]
    assert isinstance(model.get_layer("fusion"), ResidualBlock)
    features = keras.Model(model.inputs, model.get_layer("concatenate").output)(inputs)
    assert tuple(features.shape) == (32, 48)


# ---------------------------------------------------------------- saving


def test_weights_only_need_the_same_arguments_and_a_built_model(tmp_path, data):
    inputs, _ = data
    _, subclass = _pair(seed=7)
    subclass.save_weights(tmp_path / "w.weights.h5")
    fresh = MultiModalModel(6)
    with pytest.raises(ValueError, match="not yet been built"):
        fresh.load_weights(tmp_path / "w.weights.h5")
    fresh.build(SHAPES)
    fresh.load_weights(tmp_path / "w.weights.h5")
    np.testing.assert_array_equal(fresh(inputs), subclass(inputs))


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (
            {"image_shape": (16, 16)},
            ValueError,
            r"image_shape: expected \(height, width, channels\)",
        ),
        ({"image_shape": (None, 16, 16, 3)}, ValueError, "image_shape: .*no batch axis"),
        (
            {"image_shape": (4, 16, 3)},
            ValueError,
            r"image_shape\[0\]: expected an int >= 8 and <= 65536, got int 4",
        ),
        ({"image_shape": "16x16"}, TypeError, "image_shape: expected"),
        (
            {"num_classes": 1},
            ValueError,
            "num_classes: expected an int >= 2 and <= 1048576, got int 1",
        ),
        (
            {"num_classes": 2.0},
            TypeError,
            "num_classes: expected an int >= 2 and <= 1048576, got float 2.0",
        ),
        ({"meta_dim": 0}, ValueError, "meta_dim: expected an int >= 1 and <= 1048576, got int 0"),
        ({"filters": (8,)}, ValueError, "filters: expected a sequence of 2 positive ints"),
        ({"fused_units": 0}, ValueError, "fused_units: expected an int >= 1"),
    ],
)
def test_functional_multimodal_rejects_bad_arguments(kwargs, error, match):
    arguments = {"image_shape": (16, 16, 3), "meta_dim": 4, "num_classes": 6, **kwargs}
    with pytest.raises(error, match=match):
        functional_multimodal(**arguments)


def test_subclass_rejects_bad_arguments_and_shapes():
    with pytest.raises(
        ValueError, match="num_classes: expected an int >= 2 and <= 1048576, got int 1"
    ):
        MultiModalModel(1)
    with pytest.raises(ValueError, match="meta_units: expected a sequence of 2"):
        MultiModalModel(6, meta_units=(4, 4, 4))
    with pytest.raises(ValueError, match=r"input_shape\['image'\]: expected a shape of rank 4"):
        MultiModalModel(6).build([(None, 16, 16), (None, 4)])
    with pytest.raises(
        ValueError, match=r"input_shape\['image'\]\[1\]: expected an int >= 8, got int 4"
    ):
        MultiModalModel(6).build([(None, 4, 16, 3), (None, 4)])
    with pytest.raises(ValueError, match=r"input_shape\['meta'\]: expected a shape of rank 2"):
        MultiModalModel(6).build([(None, 16, 16, 3), (None, 4, 1)])
    with pytest.raises(ValueError, match=r"input_shape: expected a pair \(image, meta\) or a dict"):
        MultiModalModel(6).build([(None, 16, 16, 3)])


@pytest.mark.parametrize(
    "make_inputs, match",
    [
        (
            lambda d: tf.constant(d["image"]),
            "inputs: expected a pair .* got one EagerTensor of shape",
        ),
        (lambda d: [d["image"]], "inputs: expected a pair .* got a list of 1 items"),
        (
            lambda d: {"img": d["image"], "meta": d["meta"]},
            r"got a dict with keys \['img', 'meta'\]",
        ),
    ],
)
def test_subclass_call_rejects_inputs_in_the_wrong_structure(data, make_inputs, match):
    inputs, _ = data
    _, subclass = _pair()
    with pytest.raises(ValueError, match=match):
        subclass(make_inputs(inputs))


def test_copy_weights_rejects_mismatched_models():
    functional, _ = _pair()
    narrower = MultiModalModel(6, fused_units=48)
    narrower.build(SHAPES)
    with pytest.raises(
        ValueError, match="target: expected a layer 'fusion' with weights of shapes"
    ):
        copy_weights(functional, narrower)
    with pytest.raises(TypeError, match="target: expected a keras.Model, got Dense"):
        copy_weights(functional, keras.layers.Dense(2))


def test_copy_weights_names_source_when_the_source_has_a_layer_the_target_lacks():
    # Used to name target: a source with an extra layer is the source's fault.
    functional, subclass = _pair()
    extra = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="extra")])
    with pytest.raises(ValueError, match=r"^source: expected only layers that target has too"):
        copy_weights(extra, subclass)
    with pytest.raises(ValueError, match=r"^target: expected a layer 'fusion'"):
        copy_weights(functional, _narrower())


def _narrower():
    narrower = MultiModalModel(6, fused_units=48)
    narrower.build(SHAPES)
    return narrower


# ---------------------------------------------------------------- issue 16


@pytest.mark.parametrize(
    "argument, value",
    [
        ("image_units", None),
        ("image_units", 0),
        ("meta_units", (4, 0)),
        ("meta_units", "16"),
        ("filters", (8, None)),
    ],
)
def test_functional_multimodal_errors_name_the_argument_passed(argument, value):
    # image_units=None used to say "units: ..." (the name inside image_branch).
    with pytest.raises((TypeError, ValueError), match=rf"^{argument}(\[\d\])?: expected "):
        functional_multimodal((16, 16, 3), 4, 6, **{argument: value})


@pytest.mark.parametrize("build", [False, True], ids=["unbuilt", "built"])
@pytest.mark.parametrize(
    "make_inputs, match",
    [
        (
            lambda d: d["image"],
            r"^inputs: expected a pair \(image, meta\) or a dict with keys 'image' and 'meta', "
            r"got one ndarray of shape \(32, 16, 16, 3\)$",
        ),
        (
            lambda d: (d["meta"], d["meta"]),
            r"^inputs\['image'\]: expected images \(batch, height, width, channels\)",
        ),
        (
            lambda d: (d["image"], d["image"]),
            r"^inputs\['meta'\]: expected metadata \(batch, meta_dim\)",
        ),
        (
            lambda d: (d["image"][:, :4, :4], d["meta"]),
            r"^inputs\['image'\]: .*height and width >= 8",
        ),
        (
            lambda d: (None, d["meta"]),
            r"^inputs\['image'\]: expected images .*, got NoneType None$",
        ),
    ],
)
def test_subclass_call_says_what_the_model_expects(data, make_inputs, match, build):
    # Unbuilt, one array used to give "input_shape: ... a tuple of 4 items" from build.
    inputs, _ = data
    model = _pair()[1] if build else MultiModalModel(6)
    with pytest.raises(ValueError, match=match):
        model(make_inputs(inputs))


def test_subclass_call_checks_do_not_stop_fit_or_a_functional_wrapper(data):
    inputs, labels = data
    model = MultiModalModel(6)
    symbolic = [keras.Input((16, 16, 3)), keras.Input((4,))]
    wrapper = keras.Model(symbolic, model(symbolic))
    assert wrapper.output_shape == (None, 6)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", jit_compile=True)
    history = model.fit(inputs, labels, epochs=1, batch_size=16, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.parametrize("unbuilt", ["source", "target"])
def test_copy_weights_refuses_an_unbuilt_model(unbuilt):
    # An unbuilt source used to copy nothing and return [].
    models = {"source": functional_multimodal((16, 16, 3), 4, 6), "target": MultiModalModel(6)}
    models["target"].build(SHAPES)
    models[unbuilt] = MultiModalModel(6)
    with pytest.raises(
        ValueError,
        match=rf"^{unbuilt}: expected a built keras.Model \(build it or call it on data"
        r" first\), got MultiModalModel <MultiModalModel .*built=False>$",
    ):
        copy_weights(**models)


@pytest.mark.parametrize(
    "make",
    [
        lambda v: image_branch((16, 16, 3), units=v),
        lambda v: meta_branch(v),
        lambda v: MultiModalModel(6, fused_units=v),
        lambda v: functional_multimodal((16, 16, 3), 4, v),
    ],
)
def test_widths_have_a_maximum_checked_before_any_weight_is_made(make):
    with pytest.raises(
        ValueError, match=r"^\w+: expected an int >= \d and <= 1048576, got int 1000000000000$"
    ):
        make(10**12)


@pytest.mark.parametrize("name", ["", None, 3])
def test_branch_and_model_names_must_be_non_empty_strings(name):
    for build in (
        lambda: image_branch(name=name),
        lambda: meta_branch(name=name),
        lambda: functional_multimodal(name=name),
    ):
        with pytest.raises((TypeError, ValueError), match=r"^name: expected a non-empty str, got "):
            build()


def test_multimodal_model_passes_its_own_dtype_policy_to_every_layer():
    model = MultiModalModel(
        3, filters=(4, 4), image_units=8, meta_units=(8, 8), fused_units=8, dtype="mixed_float16"
    )
    images = np.zeros((2, 8, 8, 3), "float32")
    out = model((images, np.zeros((2, 4), "float32")))
    policies = {  # InputLayers, which the branches add when built, compute nothing
        layer.name: layer.dtype_policy.name
        for layer in model._flatten_layers(include_self=False)
        if not isinstance(layer, keras.layers.InputLayer)
    }
    assert set(policies.values()) == {"mixed_float16"}, policies
    assert out.dtype == "float16" and {w.dtype for w in model.weights} == {"float32"}


def test_numpy_arrays_of_ints_are_taken_as_sequences_as_keras_takes_them():
    # keras.Input(shape=np.array([32, 32, 3])) works; so do the companion's shapes and widths,
    # and the model is the one the tuples give (Python ints in its config).
    from_arrays = image_branch(np.array([32, 32, 3]), filters=np.array([16, 32]), units=32)
    from_tuples = image_branch((32, 32, 3), filters=(16, 32), units=32)
    assert keras.Input(shape=np.array([32, 32, 3])).shape == (None, 32, 32, 3)
    assert from_arrays.count_params() == from_tuples.count_params()
    assert from_arrays.input_shape == from_tuples.input_shape == (None, 32, 32, 3)
    json.dumps(from_arrays.get_config())  # no NumPy scalar left in the config
    with pytest.raises(TypeError, match=r"^units: expected an int"):
        image_branch((32, 32, 3), filters=(16, 32), units=np.array(32))
