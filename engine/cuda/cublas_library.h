// cuBLAS, loaded when the first GPU is set up rather than linked. Linking libcublas cost every
// process 95 MB of private memory at start (a program that only links it shows `RssAnon:
// 95192 kB`), GPU or not: 250 processes of a CUDA build ran this 24 GiB machine out of memory
// where the CPU-only build's peak at 11 MB each. The engine calls the few cuBLAS functions it
// uses through this table, filled by dlopen/dlsym from the library of the toolkit it was built
// with (KERAS_CUBLAS_LIBRARY, e.g. libcublas.so.13); a missing library is an Error naming it.
#pragma once
#include <cublas_v2.h>

namespace keras::gpu {

struct CublasLibrary {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
  decltype(&cublasDgemmStridedBatched) dgemm_strided_batched;
  // bfloat16 and float16 GEMMs (tensor cores) with float32 accumulation. Spelled out: C++ sees
  // a second, inline overload of cublasGemmStridedBatchedEx (computeType a cudaDataType).
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long int,
                                            const void*, cudaDataType, int, long long int, const void*, void*,
                                            cudaDataType, int, long long int, int, cublasComputeType_t,
                                            cublasGemmAlgo_t);
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
};

// Loaded on first call (thread-safe); throws keras::Error when the library or a symbol is missing.
const CublasLibrary& cublas();

}  // namespace keras::gpu
