#ifndef PS_KERNELS_STATUS_MACROS_H_
#define PS_KERNELS_STATUS_MACROS_H_

// Private to kernels/ (.cc and .cu files only). Named apart from common/'s
// PS_RETURN_IF_ERROR so kernels/ needs nothing from common/ (and nvcc sees
// only kernels/ headers).

#include "absl/status/status.h"

// Returns the status from the enclosing function if `expr` is not OK.
#define PS_KERNELS_RETURN_IF_ERROR(expr)                     \
  do {                                                       \
    ::absl::Status ps_kernels_status_ = (expr);              \
    if (!ps_kernels_status_.ok()) return ps_kernels_status_; \
  } while (false)

#endif  // PS_KERNELS_STATUS_MACROS_H_
