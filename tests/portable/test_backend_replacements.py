"""The replacements chapter 14's table runs for TensorFlow-only pieces, each on its backend:
chapter 13's blur through the XLA FFI and in Pallas (JAX), as a ``torch.library`` operator with
its gradient (PyTorch), ``jax.pure_callback`` with and without ``jax.custom_vjp``, DDP on two
PyTorch processes, and the optimizer row's drift after 200 steps."""

import cv2
import keras
import numpy as np
import pytest

from companion.backends._probes import ADAMW_BOUNDS, ADAMW_STEPS, adamw_drift

BACKEND = keras.backend.backend()
on_jax = pytest.mark.skipif(BACKEND != "jax", reason="a JAX replacement: the JAX lane runs it")
on_torch = pytest.mark.skipif(BACKEND != "torch", reason="a PyTorch replacement: its lane runs it")


def images_and_reference(shape=(2, 12, 10, 3), ksize=5):
    images = np.random.default_rng(4).uniform(size=shape).astype("float32")
    return images, np.stack([cv2.GaussianBlur(i, (ksize, ksize), 0) for i in images])


@on_jax
@pytest.mark.parametrize("ksize", [3, 5])
def test_the_xla_ffi_handler_equals_opencv_under_jit(ksize):
    from companion.backends._jax_blur import ffi_blur

    images, reference = images_and_reference(ksize=ksize)
    np.testing.assert_allclose(ffi_blur(images, ksize), reference, atol=1e-5)


@on_jax
def test_jit_lowers_the_ffi_call_to_a_custom_call_of_the_handler():
    import jax

    from companion.backends._jax_blur import FFI_TARGET, register_ffi_blur

    register_ffi_blur()
    x, k = np.ones((1, 4, 4, 1), "float32"), np.ones(3, "float32") / 3

    def blur(x, k):
        return jax.ffi.ffi_call(FFI_TARGET, jax.ShapeDtypeStruct(x.shape, x.dtype))(x, k)

    assert f"custom_call @{FFI_TARGET}" in jax.jit(blur).lower(x, k).as_text()
    np.testing.assert_allclose(jax.jit(blur)(x, k), x, atol=1e-6)  # a flat image stays flat


@on_jax
def test_a_pallas_kernel_in_interpret_mode_equals_opencv():
    from companion.backends._jax_blur import pallas_blur

    images, reference = images_and_reference()
    np.testing.assert_allclose(pallas_blur(images), reference, atol=1e-5)


@pytest.mark.skipif(BACKEND == "tensorflow", reason="the replacements' arguments: JAX and PyTorch")
def test_the_replacements_refuse_an_image_of_another_rank():
    from companion.backends import _jax_blur, _torch_blur

    blur = _jax_blur.ffi_blur if BACKEND == "jax" else _torch_blur.torch_blur
    with pytest.raises(ValueError, match="^images: expected a rank-4 NHWC array"):
        blur(np.ones((4, 4, 1), "float32"))


@on_jax
def test_pure_callback_has_no_gradient_and_custom_vjp_gives_it():
    import jax

    x = np.array([-8.0, 1.0, 27.0], "float32")

    def callback(t):
        return jax.pure_callback(np.cbrt, jax.ShapeDtypeStruct(x.shape, x.dtype), t)

    with pytest.raises(ValueError):
        jax.grad(lambda t: callback(t).sum())(x)
    cube_root = jax.custom_vjp(callback)
    cube_root.defvjp(lambda t: (callback(t), callback(t)), lambda y, up: (up / (3 * y * y),))
    got = jax.grad(lambda t: cube_root(t).sum())(x)
    np.testing.assert_allclose(got, 1 / (3 * np.cbrt(x) ** 2), rtol=1e-6)


@on_torch
def test_the_torch_library_op_compiles_in_one_graph_and_keeps_its_gradient():
    import torch

    from companion.backends._torch_blur import compile_report, gaussian_weights, load_torch_blur

    module, kernel = load_torch_blur(), torch.from_numpy(gaussian_weights(5))
    images, _ = images_and_reference()
    op = compile_report(lambda t: torch.ops.white_box.blur(2 * t, kernel).sum(), images)
    plain = compile_report(lambda t: module.separable_blur(2 * t, kernel).sum(), images)
    assert op == {"graphs": 1, "graph_breaks": 0, "requires_grad": True}
    assert plain["graph_breaks"] >= 1 and plain["graphs"] >= 2 and not plain["requires_grad"]


@on_torch
@pytest.mark.parametrize("shape", [(2, 12, 10, 3), (1, 3, 4, 1), (1, 5, 3, 2)])
def test_the_ops_gradient_is_the_adjoint_opencv_implies(shape):
    import torch

    from companion.backends._torch_blur import (
        blur_adjoint_reference,
        gaussian_weights,
        load_torch_blur,
    )

    load_torch_blur()
    images, _ = images_and_reference(shape)
    upstream = np.random.default_rng(5).normal(size=shape).astype("float32")
    t = torch.tensor(images, requires_grad=True)
    kernel = torch.from_numpy(gaussian_weights(5))
    (torch.ops.white_box.blur(t, kernel) * torch.from_numpy(upstream)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), blur_adjoint_reference(upstream), atol=1e-5)
    # near the border the adjoint is not the blur again: a reflected pixel counts twice
    blurred_again = np.stack([cv2.GaussianBlur(u, (5, 5), 0) for u in upstream])
    assert np.abs(t.grad.numpy() - blurred_again.reshape(shape)).max() > 1e-2


@on_torch
@pytest.mark.slow  # two PyTorch processes beside this one
def test_ddp_on_two_processes_gives_both_ranks_the_weights_of_one():
    from companion.backends._ddp import ddp_replicas
    from companion.backends._steps import initial_weights, step_data, step_model

    replicas = ddp_replicas()  # raises unless both ranks hold the same bits
    x, y = step_data()
    with keras.device("cpu"):  # where gloo's processes train
        single = step_model(custom_step=False)
        single.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    for two, one, start in zip(replicas, single.get_weights(), initial_weights()):
        np.testing.assert_allclose(two, one, atol=1e-6)  # measured 6e-8
        assert np.abs(two - start).max() > 1e-3  # it trained


@pytest.mark.slow  # 2 x 200 steps of fit
def test_the_companions_adamw_stays_within_this_backends_bound_of_keras():
    assert ADAMW_STEPS >= 200
    assert 0.0 <= adamw_drift() <= ADAMW_BOUNDS[BACKEND]
