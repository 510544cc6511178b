// DLPack exchange (DLManagedTensor, DLPack 0.6+), the format PyTorch, JAX and CuPy speak.
#pragma once

#include <dlpack/dlpack.h>

#include "kvattn/core/tensor.h"

namespace kvattn {

// The view of one DLTensor, with from_dlpack's checks and no heap allocation (bindings call
// it for every tensor of every call). Throws kvattn::Error as from_dlpack does.
TensorView from_dltensor(const DLTensor& tensor);

// DLPack's code for a kvattn dtype.
DLDataType to_dlpack_dtype(DType dtype);

// Views a DLPack tensor without copying. The caller keeps `managed` alive while the view is
// used; kvattn never calls its deleter. Throws kvattn::Error for dtypes or devices kvattn
// does not support, or a non-zero byte_offset that is not element aligned.
TensorView from_dlpack(const DLManagedTensor* managed);

// Exports a tensor: the returned DLManagedTensor shares the tensor's storage and keeps it
// alive until its deleter is called.
DLManagedTensor* to_dlpack(const Tensor& tensor);

}  // namespace kvattn
