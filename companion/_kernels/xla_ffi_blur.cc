// Chapter 13's blur as an XLA FFI handler: JAX calls it from compiled code on the CPU.
// companion/backends/_xla_ffi.py compiles it against jaxlib's headers (jax.ffi.include_dir)
// and registers the symbol WhiteBoxBlur with jax.ffi.register_ffi_target.
#include <cstdint>

#include "separable_blur.cc"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// The handler: XLA passes the buffers it allocated; the dimensions come with them.
static ffi::Error Blur(ffi::Buffer<ffi::F32> images, ffi::Buffer<ffi::F32> kernel,
                       ffi::ResultBuffer<ffi::F32> out) {
  const auto dims = images.dimensions();
  if (dims.size() != 4) {
    return ffi::Error::InvalidArgument("images: expected rank 4 (N, H, W, C)");
  }
  if (kernel.dimensions().size() != 1 || kernel.dimensions()[0] % 2 == 0) {
    return ffi::Error::InvalidArgument("kernel: expected rank 1 with an odd length");
  }
  white_box::SeparableBlur(images.typed_data(), kernel.typed_data(), kernel.dimensions()[0],
                           dims[0], dims[1], dims[2], dims[3], out->typed_data());
  return ffi::Error::Success();
}

// The symbol JAX registers: which buffers the handler takes and returns.
XLA_FFI_DEFINE_HANDLER_SYMBOL(WhiteBoxBlur, Blur,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
