// File: core/host_device.h
//
// TC_HOST_DEVICE marks a small inline function that compiles for the host and, under nvcc,
// for the device too (__host__ __device__), so that a CUDA kernel and the CPU code run the
// same arithmetic (core/index_math.h, core/half_float.h, core/embedding_bag_math.h).
// Such functions use no Abseil and no standard library beyond <cmath>/<cstring>/<cstdint>,
// and are valid C++17 (the CUDA sources are compiled as C++17).

#ifndef TENSORCOMPUTE_CORE_HOST_DEVICE_H_
#define TENSORCOMPUTE_CORE_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define TC_HOST_DEVICE __host__ __device__
#else
#define TC_HOST_DEVICE
#endif

#endif  // TENSORCOMPUTE_CORE_HOST_DEVICE_H_
