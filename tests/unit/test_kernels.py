import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import cv2
import keras
import numpy as np
import pytest
import tensorflow as tf

from companion import _kernels, kernels, tflite
from companion.gradients import gradient_error
from companion.kernels import BuildError, CppGaussianBlur, build_blur_op, cpp_blur, load_blur_op
from companion.notebook import run_python
from companion.pyfunc import gaussian_kernel, native_blur


def _blur_matrix(op, kernel, shape):
    """The dense matrix of a linear op on images of ``shape``, column by column."""
    size = int(np.prod(shape))
    columns = [op(np.eye(size)[i].reshape(shape), kernel).numpy().ravel() for i in range(size)]
    return np.stack(columns, axis=1)


def test_cpp_blur_matches_opencv_and_native_rank4_including_borders(
    blur_case, random_images, opencv_blur
):
    ksize, sigma = blur_case
    images = random_images((3, 19, 23, 3))
    got = cpp_blur(images, ksize, sigma).numpy()
    expected = opencv_blur(images, ksize, sigma)
    assert np.abs(got - expected).max() < 1e-5
    assert np.abs(got - native_blur(images, ksize, sigma).numpy()).max() < 1e-5
    border = np.ones(got.shape[1:3], bool)
    border[ksize // 2 : -(ksize // 2) or None, ksize // 2 : -(ksize // 2) or None] = False
    if ksize > 1:
        assert np.abs(got[:, border] - expected[:, border]).max() < 1e-5


@pytest.mark.parametrize("ksize, sigma", [(3, 0.0), (5, 0.0), (9, 2.0)])
@pytest.mark.parametrize("channels", [1, 4])
def test_cpp_blur_matches_opencv_rank3(ksize, sigma, channels, random_images):
    image = random_images((16, 12, channels), seed=1)
    got = cpp_blur(image, ksize, sigma)
    assert got.shape == image.shape
    expected = cv2.GaussianBlur(image, (ksize, ksize), sigma).reshape(image.shape)
    assert np.abs(got.numpy() - expected).max() < 1e-5


def test_large_batches_split_in_chunks_over_threads_equal_opencv_and_native_gradient(
    random_images, opencv_blur
):
    # 8 * 128 rows of 96 x 3 floats: about 50 chunks, shared by the caller and the pool's threads.
    images = tf.constant(random_images((8, 128, 96, 3), seed=6))
    np.testing.assert_allclose(
        cpp_blur(images, 7).numpy(), opencv_blur(images.numpy(), 7, 0.0), rtol=0, atol=1e-5
    )
    upstream = tf.constant(random_images((8, 128, 96, 3), seed=7))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(images)
        ours, theirs = (
            tf.reduce_sum(blur(images, 7) * upstream) for blur in (cpp_blur, native_blur)
        )
    np.testing.assert_allclose(
        tape.gradient(ours, images), tape.gradient(theirs, images), rtol=0, atol=1e-5
    )


def test_float64_and_unknown_shape_in_tf_function(random_images, opencv_blur):
    images = random_images((2, 10, 14, 2), dtype=np.float64)
    spec = tf.TensorSpec([None, None, None, 2], tf.float64)
    traced = tf.function(lambda x: cpp_blur(x, 7, 1.5), input_signature=[spec])
    # the shape function's output shape
    assert traced.get_concrete_function().output_shapes.as_list() == [None, None, None, 2]
    got = traced(images).numpy()
    assert got.dtype == np.float64
    assert np.abs(got - opencv_blur(images, 7, 1.5)).max() < 1e-12


def test_smallest_images_and_empty_batch(random_images):
    # height = width = ksize // 2 + 1: every output pixel is a border pixel
    image = random_images((3, 3, 1))
    assert (
        np.abs(cpp_blur(image, 5).numpy() - cv2.GaussianBlur(image, (5, 5), 0)[..., None]).max()
        < 1e-6
    )
    assert cpp_blur(np.zeros((0, 8, 8, 3), np.float32)).shape == (0, 8, 8, 3)


def test_in_tf_data(random_images, opencv_blur):
    images = random_images((4, 20, 18, 3))
    dataset = tf.data.Dataset.from_tensor_slices(images).map(lambda x: cpp_blur(x, 7, 2.0))
    assert dataset.element_spec.shape == (20, 18, 3)  # the shape function keeps the static shape
    got = np.stack([x.numpy() for x in dataset])
    assert np.abs(got - opencv_blur(images, 7, 2.0)).max() < 1e-5


@pytest.mark.parametrize("ksize, shape", [(3, (1, 5, 6, 2)), (5, (2, 4, 7, 1)), (7, (1, 6, 4, 1))])
def test_gradient_matches_finite_differences_float64(ksize, shape, random_images):
    # Small images: most pixels are border pixels, where the adjoint differs from the blur.
    x = random_images(shape, seed=2, dtype=np.float64)
    assert gradient_error(lambda t: cpp_blur(t, ksize, 1.3), x) < 1e-9


def test_adjoint_is_the_transpose_even_for_an_asymmetric_kernel():
    op = load_blur_op()
    kernel = np.array([0.1, 0.5, 0.2, 0.15, 0.05])
    blur = _blur_matrix(op.gaussian_blur, kernel, (1, 6, 7, 2))
    adjoint = _blur_matrix(op.gaussian_blur_grad, kernel, (1, 6, 7, 2))
    np.testing.assert_allclose(adjoint, blur.T, rtol=0, atol=1e-15)
    assert np.abs(blur - blur.T).max() > 0.1  # so the blur is NOT its own adjoint at the borders


def test_gradient_of_the_gradient_and_against_native_blur(random_images):
    x = tf.constant(random_images((2, 9, 8, 3), seed=3, dtype=np.float64))
    upstream = tf.constant(random_images((2, 9, 8, 3), seed=4, dtype=np.float64))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours = tf.reduce_sum(cpp_blur(x, 5, 1.0) * upstream)
        theirs = tf.reduce_sum(native_blur(x, 5, 1.0) * upstream)
    np.testing.assert_allclose(tape.gradient(ours, x), tape.gradient(theirs, x), rtol=0, atol=1e-12)
    assert (
        gradient_error(
            lambda t: load_blur_op().gaussian_blur_grad(t, gaussian_kernel(3)),
            random_images((1, 4, 5, 1)),
        )
        < 1e-9
    )


def test_layer_trains_saves_and_loads_in_a_fresh_process(tmp_path, random_images, opencv_blur):
    keras.utils.set_random_seed(0)
    images = random_images((8, 16, 16, 3))
    inputs = keras.Input((16, 16, 3))
    x = CppGaussianBlur(ksize=7, sigma=1.3, name="blur")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(x)))
    model.compile(optimizer="sgd", loss="mse")
    data = tf.data.Dataset.from_tensor_slices((images, np.zeros((8, 2), np.float32))).batch(4)
    model.fit(data, epochs=1, shuffle=False, verbose=0)  # gradients flow through the op
    expected = model(images).numpy()
    blurred = keras.Model(inputs, model.get_layer("blur").output)(images).numpy()
    assert np.abs(blurred - opencv_blur(images, 7, 1.3)).max() < 1e-5
    model.save(tmp_path / "m.keras")
    model.export(tmp_path / "exported", verbose=False)
    np.save(tmp_path / "x.npy", images)
    np.save(tmp_path / "y.npy", expected)
    code = textwrap.dedent(f"""
        import numpy as np, tensorflow as tf
        root = {str(tmp_path)!r}
        x, y = np.load(root + "/x.npy"), np.load(root + "/y.npy")
        try:
            tf.saved_model.load(root + "/exported")
        except Exception as error:
            print("without the library:", "Op type not registered 'GaussianBlur'" in str(error))
        from companion.kernels import load_blur_op
        load_blur_op()
        loaded = tf.saved_model.load(root + "/exported")  # keep a reference while calling it
        served = loaded.serve(x).numpy()
        print("exported:", np.abs(served - y).max() < 1e-6)
        import keras
        restored = keras.saving.load_model(root + "/m.keras")
        print(
            "keras:",
            np.abs(restored(x).numpy() - y).max() < 1e-6,
            restored.get_layer("blur").ksize,
        )
    """)
    result = run_python(code)
    assert (
        result.stdout.split() == "without the library: True exported: True keras: True 7".split()
    ), result.stderr[-2000:]


def test_tflite_cannot_run_the_op(tmp_path):
    inputs = keras.Input((8, 8, 1))
    keras.Model(inputs, CppGaussianBlur()(inputs)).export(tmp_path / "m", verbose=False)
    with pytest.raises(Exception) as caught:  # the converter's ConverterError is not public API
        tflite.convert(tmp_path / "m", select_tf_ops=True)
    assert tflite.refused_ops(caught.value) == ["GaussianBlur"]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"ksize": 4}, ValueError, "ksize: expected an odd int >= 1.*, got int 4"),
        ({"ksize": 0}, ValueError, "ksize"),
        ({"ksize": 5.0}, TypeError, "ksize"),
        ({"sigma": -1.0}, ValueError, "sigma"),
        (
            {"images": np.zeros((8, 8, 3), np.int32)},
            TypeError,
            "images: expected a floating-point tensor .*, got dtype int32; cast it first",
        ),
        ({"images": np.zeros((8, 8, 3), np.complex64)}, TypeError, "got dtype complex64"),
        ({"images": {"a": 1}}, TypeError, "images: expected a floating-point tensor, got dict"),
        ({"images": np.zeros((8, 8), np.float32)}, ValueError, "images: expected rank 3"),
        ({"images": np.zeros((1, 2, 8, 8, 3), np.float32)}, ValueError, "images: expected rank 3"),
        ({"images": np.zeros((8, 2, 3), np.float32)}, ValueError, "ksize // 2 = 2"),
    ],
)
def test_bad_input_raises_clear_errors(kwargs, error, match, random_images):
    arguments = {"images": random_images((8, 8, 3)), **kwargs}
    with pytest.raises(error, match=match):
        cpp_blur(**arguments)


def test_the_kernel_checks_its_inputs_too(random_images):
    op = load_blur_op()
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="kernel: expected rank 1 with an odd length"
    ):
        op.gaussian_blur(random_images((1, 8, 8, 1)), np.ones(4, np.float32))
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="images: expected height and width > ksize // 2"
    ):
        op.gaussian_blur(random_images((1, 2, 8, 1)), np.ones(5, np.float32))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="rank 4|must be rank 4"):
        op.gaussian_blur(random_images((8, 8, 1)), np.ones(5, np.float32))
    with pytest.raises(ValueError, match="ksize"):
        CppGaussianBlur(ksize=2)


def test_missing_compiler_and_headers_say_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("WHITE_BOX_TF_CXX", "no-such-compiler-g++")
    with pytest.raises(
        BuildError, match="no-such-compiler-g\\+\\+.*not found.*apt-get install g\\+\\+"
    ):
        build_blur_op(cache_dir=tmp_path)
    monkeypatch.delenv("WHITE_BOX_TF_CXX")
    monkeypatch.setattr(_kernels, "tensorflow_flags", lambda: (["-I/nowhere/include"], []))
    with pytest.raises(BuildError, match="TensorFlow's C\\+\\+ headers.*/nowhere/include"):
        build_blur_op(cache_dir=tmp_path)
    assert not list(tmp_path.iterdir())  # nothing half-built is left behind


def test_compile_errors_are_reported_with_the_compiler_output(monkeypatch, tmp_path):
    broken = tmp_path / "broken.cc"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(_kernels, "SOURCE", broken)
    with pytest.raises(BuildError, match="compiling broken.cc failed"):
        build_blur_op(cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("*.so"))


@pytest.mark.slow
def test_concurrent_builds_compile_once_and_the_cache_is_reused(monkeypatch, tmp_path):
    # Two processes build into an empty cache at once: one compiles, the other waits and reuses.
    code = "from companion.kernels import build_blur_op; print(build_blur_op())"
    env = {**os.environ, "WHITE_BOX_TF_CACHE": str(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "3"}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outputs = [child.communicate(timeout=300) for child in children]
    assert all(child.returncode == 0 for child in children), [err[-1000:] for _, err in outputs]
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1
    library = paths.pop()
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file() and p.name != ".lock") == [
        "blur_op.so",
        "manifest.json",
    ]
    # A second build with the same key does not run the compiler.
    monkeypatch.setattr(
        _kernels, "_compile", lambda *args: pytest.fail("recompiled a cached library")
    )
    assert str(build_blur_op(cache_dir=tmp_path)) == library
    monkeypatch.setenv("WHITE_BOX_TF_CACHE", str(tmp_path))
    assert str(build_blur_op()) == library


def test_cache_key_depends_on_the_source(monkeypatch, tmp_path):
    key = kernels.build_key()
    changed = tmp_path / "blur_op.cc"
    changed.write_text(kernels.SOURCE.read_text() + "\n// changed\n")
    monkeypatch.setattr(_kernels, "SOURCE", changed)
    assert kernels.build_key() != key


def test_source_sections_and_unknown_section():
    assert 'REGISTER_OP("GaussianBlurGrad")' in kernels.source_section("registration")
    assert "OP_REQUIRES" in kernels.source_section("kernel")
    with pytest.raises(ValueError, match="name: expected one of"):
        kernels.source_section("nothing")


# --- GPU runtime and mixed precision, checked on the CPU ----------------------------------------


def _compile_as_on_a_gpu(model):
    """``model.compile()`` with a GPU visible to Keras: jit_compile="auto" resolves as on Colab."""
    from companion.diagnostics import simulated_gpu

    with simulated_gpu():
        model.compile(optimizer="sgd", loss="mse")
    return model


def _blur_model(blur_layer):
    inputs = keras.Input((16, 16, 3))
    x = blur_layer(keras.layers.Conv2D(3, 3, padding="same")(inputs))
    return keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(x)))


def test_auto_jit_compile_on_a_gpu_leaves_the_compiled_blur_out_of_xla(random_images):
    from companion.pyfunc import GaussianBlur

    keras.utils.set_random_seed(0)
    jitted = _compile_as_on_a_gpu(_blur_model(GaussianBlur()))
    assert jitted.jit_compile is True  # the fake GPU works: Keras chose XLA for the native blur
    model = _compile_as_on_a_gpu(_blur_model(CppGaussianBlur()))
    # Under XLA this step fails: "No registered 'GaussianBlur' OpKernel for XLA_CPU_JIT devices".
    history = model.fit(
        random_images((4, 16, 16, 3)), np.zeros((4, 2), np.float32), epochs=1, verbose=0
    )
    assert np.isfinite(history.history["loss"][0]) and model.jit_compile is False


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_images_are_blurred_in_float32_and_returned_in_their_dtype(
    dtype, random_images, opencv_blur
):
    images = random_images((2, 12, 10, 3), seed=5)
    half = tf.cast(images, dtype)
    got = cpp_blur(half, 5, 1.2)
    assert got.dtype == dtype
    # one rounding
    expected = tf.cast(opencv_blur(tf.cast(half, tf.float32).numpy(), 5, 1.2), dtype)
    np.testing.assert_array_equal(
        tf.cast(got, tf.float32).numpy(), tf.cast(expected, tf.float32).numpy()
    )
    with tf.GradientTape() as tape:
        tape.watch(half)
        total = tf.reduce_sum(tf.cast(cpp_blur(half, 5, 1.2), tf.float32) * 3.0)
    gradient = tape.gradient(total, half)
    assert gradient.dtype == dtype
    expected_gradient = load_blur_op().gaussian_blur_grad(
        tf.fill(half.shape, 3.0), gaussian_kernel(5, 1.2).astype(np.float32)
    )
    np.testing.assert_array_equal(
        tf.cast(gradient, tf.float32).numpy(),
        tf.cast(tf.cast(expected_gradient, dtype), tf.float32).numpy(),
    )


def test_layer_trains_under_mixed_float16(random_images):
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = _blur_model(CppGaussianBlur(ksize=5))
        model.compile(optimizer="sgd", loss="mse")
        images = random_images((4, 16, 16, 3))
        conv = model.layers[1]
        before = conv.get_weights()[0].copy()
        history = model.fit(images, np.ones((4, 2), np.float32), epochs=1, verbose=0)
        blur = model.layers[2]
        assert blur.compute_dtype == "float16" and blur.output.dtype == "float16"
        assert np.isfinite(history.history["loss"][0])
        assert np.abs(conv.get_weights()[0] - before).max() > 0  # the gradient went through the op
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_the_weights_are_computed_once_and_graphs_get_their_own_constant(
    monkeypatch, random_images
):
    calls = []
    real = kernels.gaussian_kernel
    monkeypatch.setattr(kernels, "gaussian_kernel", lambda *args: calls.append(args) or real(*args))
    images = random_images((2, 9, 9, 3))
    first, second = cpp_blur(images, 13, 0.7), cpp_blur(images, 13, 0.7)  # eager: one cached tensor
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    assert calls == [(13, 0.7)]
    graph = (
        tf.function(lambda x: cpp_blur(x, 13, 0.7))
        .get_concrete_function(tf.TensorSpec([2, 9, 9, 3]))
        .graph
    )
    (blur,) = [op for op in graph.get_operations() if op.type == "GaussianBlur"]
    assert blur.inputs[1].op.type == "Const"  # not an eager tensor captured from outside the graph
    assert calls == [(13, 0.7)]


# --- the build: a cached library needs no compiler; the project's source compiles without warnings


@pytest.fixture(scope="module")
def fresh_build(tmp_path_factory):
    """One build into an empty cache (the compile runs here, with this module's flags).

    Its compile, about 30 s on 2 busy cores, makes each test that uses it ``slow``.
    """
    root = tmp_path_factory.mktemp("cache")
    return root, build_blur_op(cache_dir=root)


@pytest.mark.slow
def test_a_cached_build_loads_without_a_compiler(fresh_build, tmp_path):
    root, library = fresh_build
    code = textwrap.dedent("""
        import numpy as np
        from companion.kernels import build_blur_op, cpp_blur
        print(build_blur_op())
        print(cpp_blur(np.ones((1, 8, 8, 1), np.float32)).numpy().max())
    """)
    result = run_python(
        code, env={"WHITE_BOX_TF_CXX": "/nonexistent", "WHITE_BOX_TF_CACHE": str(root)}
    )
    assert result.stdout.split() == [str(library), "1.0"], result.stderr[-2000:]
    # Without a compiler and without a matching build, the error says both.
    with pytest.MonkeyPatch.context() as patched:
        patched.setenv("WHITE_BOX_TF_CXX", "/nonexistent")
        with pytest.raises(
            BuildError, match="'/nonexistent', which is not found.*no intact cached build in"
        ):
            build_blur_op(cache_dir=tmp_path)


@pytest.mark.slow
def test_a_build_records_a_manifest_and_compiles_without_warnings(fresh_build):
    root, library = fresh_build
    command = kernels.build_command(kernels.SOURCE, "blur_op.so", "g++")
    assert "-w" not in command and {"-Wall", "-Wextra"} <= set(command)
    assert not [flag for flag in command if flag.startswith("-I")] and "-isystem" in command
    manifest = json.loads((library.parent / "manifest.json").read_text())
    assert manifest["tensorflow"] == tf.__version__
    assert manifest["source_sha256"] == hashlib.sha256(kernels.SOURCE.read_bytes()).hexdigest()
    assert manifest["library"] == {
        "name": "blur_op.so",
        "size": library.stat().st_size,
        "sha256": hashlib.sha256(library.read_bytes()).hexdigest(),
    }
    warnings = [line for line in manifest["compiler_output"].splitlines() if "warning" in line]
    assert not [line for line in warnings if "blur_op.cc" in line], warnings[:5]


# --- a damaged cache, an unusable cache or compiler: rebuilt or a BuildError, never a crash ---


def _copy_of_the_cache(fresh_build, tmp_path):
    """A copy of the fresh build's cache (same key: it is this process's build), and its library."""
    root, library = fresh_build
    copy = tmp_path / "cache"
    shutil.copytree(root, copy)
    return copy, copy / library.parent.name / library.name


def _intact(library):
    manifest = json.loads((library.parent / "manifest.json").read_text())["library"]
    return (
        manifest["size"] == library.stat().st_size
        and manifest["sha256"] == hashlib.sha256(library.read_bytes()).hexdigest()
    )


@pytest.mark.slow
def test_a_truncated_cached_library_is_rebuilt_not_loaded(fresh_build, tmp_path):
    # Loading half a library killed Python with SIGBUS: the child would die with a signal.
    root, library = _copy_of_the_cache(fresh_build, tmp_path)
    data = library.read_bytes()
    library.write_bytes(data[: len(data) // 2])
    code = (
        "import numpy as np\n"
        "from companion.kernels import cpp_blur\n"
        "print(cpp_blur(np.ones((1, 8, 8, 1), np.float32)).numpy().max())"
    )
    result = run_python(code, env={"WHITE_BOX_TF_CACHE": str(root)})
    assert (result.returncode, result.stdout.split()) == (0, ["1.0"]), result.stderr[-2000:]
    assert _intact(library)


def _fake_compile(good_library, calls):
    """Stands for the compiler: writes a copy of an intact library where the build asks."""

    def compile_(command, output):
        calls.append(output)
        shutil.copyfile(good_library, output)
        return ""

    return compile_


@pytest.mark.parametrize(
    "damage",
    [
        "flipped bytes",
        "no manifest",
        "manifest not JSON",
        "manifest of another file",
        "library missing",
        "stale partial files",
    ],
)
@pytest.mark.slow
def test_a_damaged_or_unrecorded_build_is_rebuilt(fresh_build, tmp_path, monkeypatch, damage):
    root, library = _copy_of_the_cache(fresh_build, tmp_path)
    manifest = library.parent / "manifest.json"
    # flipped bytes: same size, other content (TensorFlow's NotFoundError at every load);
    # no manifest: e.g. a library copied in by hand, or a build killed before its manifest
    if damage == "flipped bytes":
        data = bytearray(library.read_bytes())
        data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
        library.write_bytes(bytes(data))
    elif damage == "no manifest":
        manifest.unlink()
    elif damage == "manifest not JSON":
        manifest.write_text('{"library": ')
    elif damage == "manifest of another file":
        record = json.loads(manifest.read_text())
        manifest.write_text(json.dumps({**record, "library": {**record["library"], "size": 1}}))
    elif damage == "library missing":
        library.unlink()
    else:  # a process killed while it compiled: its temporary files, and no library yet
        library.unlink()
        (library.parent / "blur_op.999.tmp.so").write_bytes(b"half")
        (library.parent / "manifest.json.999.tmp").write_text("{")
    calls = []
    monkeypatch.setattr(_kernels, "_compile", _fake_compile(fresh_build[1], calls))
    assert build_blur_op(cache_dir=root) == library
    assert len(calls) == 1 and _intact(library)
    assert sorted(p.name for p in library.parent.iterdir()) == [
        ".lock",
        "blur_op.so",
        "manifest.json",
    ]
    assert build_blur_op(cache_dir=root) == library and len(calls) == 1  # now trusted as it is


@pytest.mark.slow
def test_without_a_compiler_a_damaged_cached_build_is_not_used(fresh_build, tmp_path, monkeypatch):
    root, library = _copy_of_the_cache(fresh_build, tmp_path)
    library.write_bytes(library.read_bytes()[:1000])
    monkeypatch.setenv("WHITE_BOX_TF_CXX", "/nonexistent")
    with pytest.raises(BuildError, match="no intact cached build in"):
        build_blur_op(cache_dir=root)


def test_a_library_tensorflow_cannot_load_is_a_build_error(tmp_path, monkeypatch):
    impostor = tmp_path / "blur_op.so"
    impostor.write_text("recorded in its manifest, yet no shared library")
    monkeypatch.setattr(kernels, "build_blur_op", lambda: impostor)
    with pytest.raises(
        BuildError, match=f"{impostor}: TensorFlow cannot load it .*delete {tmp_path} to rebuild"
    ):
        # the uncached function: this process has loaded the real one
        kernels.load_blur_op.__wrapped__()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"cache_dir": ""}, ValueError, "cache_dir: expected a non-empty path .*, got str ''"),
        ({"cache_dir": 3}, TypeError, "cache_dir: expected a non-empty path .*, got int 3"),
        (
            {"cxx": 5},
            TypeError,
            "cxx: expected a C\\+\\+ compiler \\(a non-empty str\\) or None, got int 5",
        ),
        ({"cxx": ""}, ValueError, "cxx: expected a C\\+\\+ compiler"),
        ({"cxx": ["g++"]}, TypeError, "cxx: expected"),
        ({"cxx": "false"}, BuildError, "compiler: 'false' --version failed \\(exit 1\\)"),
        (
            {"cxx": "echo"},
            BuildError,
            "with 'echo' exited 0 but wrote no library.*is 'echo' a C\\+\\+ compiler",
        ),
    ],
)
def test_bad_build_arguments_and_compilers_get_clear_errors(
    tmp_path, monkeypatch, kwargs, error, match
):
    monkeypatch.chdir(tmp_path)  # an empty cache_dir once meant this folder
    with pytest.raises(error, match=match):
        build_blur_op(**{"cache_dir": tmp_path / "cache", **kwargs})
    assert not list(tmp_path.rglob("*.so")) and not list(tmp_path.rglob("*.tmp*"))


def test_a_cache_that_is_a_file_or_under_a_file_is_a_build_error(tmp_path):
    afile = tmp_path / "cache"
    afile.write_text("not a folder")
    with pytest.raises(BuildError, match=f"cache_dir: expected a folder, got the file {afile}$"):
        build_blur_op(cache_dir=afile)
    with pytest.raises(
        BuildError,
        match="cache: cannot write the build to .*cache/.*NotADirectoryError.*WHITE_BOX_TF_CACHE",
    ):
        build_blur_op(cache_dir=afile / "inside")


@contextlib.contextmanager
def _read_only(folder):
    """``folder`` made read-only, also for root (who writes through permissions: immutable
    instead)."""
    make, undo = (
        (["chattr", "+i"], ["chattr", "-i"])
        if os.geteuid() == 0
        else (["chmod", "555"], ["chmod", "755"])
    )
    subprocess.run([*make, str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run([*undo, str(folder)], check=True)


def test_an_unwritable_cache_is_a_build_error(tmp_path):
    with _read_only(tmp_path), pytest.raises(BuildError) as caught:
        build_blur_op(cache_dir=tmp_path)
    assert str(caught.value).startswith(f"cache: cannot write the build to {tmp_path}/")
    assert "PermissionError" in str(caught.value) and "writable folder" in str(caught.value)


def test_the_command_line_prints_a_build_error_without_a_traceback(tmp_path):
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "WHITE_BOX_TF_CXX": "false",
        "WHITE_BOX_TF_CACHE": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "-m", "companion.kernels"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("companion.kernels: compiler: 'false' --version failed")
    )
    assert "no intact cached build in" in result.stderr


# --- memory: one padded row per thread, whatever the kernel --------------------------------------


def test_a_kernel_as_large_as_the_image_needs_no_memory_of_image_times_kernel():
    # Per-row tap lists took height x ksize + width x ksize pairs: 20 to 40 MB here, 3 GB for a
    # 5001 x 5001 image with ksize 10001. The output (2 MB) is all the op should allocate.
    code = textwrap.dedent("""
        import resource
        import numpy as np
        from companion.kernels import cpp_blur
        images = np.random.default_rng(0).random((1, 701, 701, 1)).astype(np.float32)
        cpp_blur(images[:, :8, :8], 3)  # loads the library
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        blurred = cpp_blur(images, 1401).numpy()
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, blurred.shape)
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    grown_mb = float(result.stdout.split()[0])
    assert grown_mb < 12, f"the peak memory grew by {grown_mb:.1f} MB"


@pytest.mark.parametrize("shape", [(1, 6, 7, 2), (2, 9, 5, 1)])
def test_kernels_longer_than_the_image_match_opencv_and_the_adjoint_is_the_transpose(
    shape, random_images, opencv_blur
):
    ksize = 2 * min(shape[1:3]) - 1  # the largest reflect-101 allows: every pixel is a border pixel
    images = random_images(shape, seed=8)
    np.testing.assert_allclose(
        cpp_blur(images, ksize, 2.5).numpy(), opencv_blur(images, ksize, 2.5), rtol=0, atol=1e-6
    )
    op, kernel = load_blur_op(), np.random.default_rng(9).random(ksize)  # asymmetric
    single = (1, *shape[1:])
    blur = _blur_matrix(op.gaussian_blur, kernel, single)
    np.testing.assert_allclose(
        _blur_matrix(op.gaussian_blur_grad, kernel, single), blur.T, rtol=0, atol=1e-13
    )


# --- the layer: empty batches, inputs named in errors -------------------------------------------


def test_the_layer_returns_an_empty_batch_eagerly_in_tf_function_and_in_a_model():
    layer = CppGaussianBlur(ksize=3)
    empty = np.zeros((0, 8, 8, 3), np.float32)
    assert layer(empty).shape == (0, 8, 8, 3)
    assert layer(keras.Variable(empty)).shape == (0, 8, 8, 3)
    assert tf.function(layer)(tf.constant(empty)).shape == (0, 8, 8, 3)
    inputs = keras.Input((8, 8, 3))
    assert keras.Model(inputs, CppGaussianBlur()(inputs))(empty).shape == (0, 8, 8, 3)


@pytest.mark.parametrize(
    "inputs, error, match",
    [
        ("abc", TypeError, "inputs: expected a floating-point tensor .*got dtype string"),
        (None, TypeError, "inputs: expected a floating-point tensor, got NoneType None"),
        (np.ones((8, 8), np.float32), ValueError, "inputs: expected rank 3 \\(H, W, C\\) or 4"),
        (
            np.ones((1, 2, 8, 1), np.float32),
            ValueError,
            "inputs: expected height and width > ksize // 2 = 2",
        ),
        (keras.Input((2, 8, 1)), ValueError, "inputs: expected height and width > ksize // 2 = 2"),
        (
            keras.Input((8, 8, 1), dtype="int32"),
            TypeError,
            "inputs: expected dtype float16, .*got dtype int32",
        ),
    ],
)
def test_the_layer_names_its_inputs_in_errors(inputs, error, match):
    with pytest.raises(error, match=match):
        CppGaussianBlur(ksize=5)(inputs)


def test_cpp_blur_takes_keras_variables(random_images):
    images = random_images((1, 9, 9, 2))
    np.testing.assert_array_equal(
        cpp_blur(keras.Variable(images), 3).numpy(), cpp_blur(images, 3).numpy()
    )


def test_the_build_system_sits_beside_its_source_and_the_op_module_re_exports_it():
    assert kernels.SOURCE == _kernels.SOURCE
    assert kernels.SOURCE.parent == Path(_kernels.__file__).parent
    assert kernels.build_blur_op is _kernels.build_blur_op
    assert set(kernels.__all__) >= {"build_blur_op", "build_key", "BuildError", "source_section"}
