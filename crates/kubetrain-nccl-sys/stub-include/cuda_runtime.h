/* Just enough of the CUDA runtime API for bindgen to parse nccl.h (used by regenerate.sh only). */
#ifndef KUBETRAIN_STUB_CUDA_RUNTIME_H
#define KUBETRAIN_STUB_CUDA_RUNTIME_H
#include <stddef.h>
#define CUDART_VERSION 12080
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
#endif
