// DS4_HD: marks an inline function that both the C++ compiler and nvcc compile, so the same code
// runs on the host (and in its tests) and in CUDA kernels.
#pragma once

#ifdef __CUDACC__
#define DS4_HD __host__ __device__ inline
#else
#define DS4_HD inline
#endif
