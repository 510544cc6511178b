// DLPack exchange (DLManagedTensor, DLPack 0.6+), the format PyTorch, JAX and CuPy speak.
#pragma once

#include "kvattn/core/tensor.h"

struct DLManagedTensor;  // from <dlpack/dlpack.h>

namespace kvattn {

// Views a DLPack tensor without copying. The caller keeps `managed` alive while the view is
// used; kvattn never calls its deleter. Throws kvattn::Error for dtypes or devices kvattn
// does not support, or a non-zero byte_offset that is not element aligned.
TensorView from_dlpack(const DLManagedTensor* managed);

// Exports a tensor: the returned DLManagedTensor shares the tensor's storage and keeps it
// alive until its deleter is called.
DLManagedTensor* to_dlpack(const Tensor& tensor);

}  // namespace kvattn
