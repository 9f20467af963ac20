#ifndef PS_KERNELS_HOST_DEVICE_H_
#define PS_KERNELS_HOST_DEVICE_H_

// PS_HOST_DEVICE marks math that both backends share: under nvcc it is
// compiled for host and device, everywhere else it is a plain inline function.
#if defined(__CUDACC__)
#define PS_HOST_DEVICE __host__ __device__
#else
#define PS_HOST_DEVICE
#endif

#endif  // PS_KERNELS_HOST_DEVICE_H_
