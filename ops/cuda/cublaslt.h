// Owned cuBLASLt objects: the handle, a matmul description and matrix layouts.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "ops/cuda/check.h"
#include "ops/cuda/unique_handle.h"

namespace trainer::cuda {

class LtHandle {
 public:
  LtHandle() {
    cublasLtHandle_t h = nullptr;
    check(cublasLtCreate(&h), "cublasLtCreate");
    handle_ = Owned(h);
  }
  cublasLtHandle_t get() const { return handle_.get(); }

 private:
  using Owned = UniqueHandle<cublasLtHandle_t, cublasLtDestroy>;
  Owned handle_;
};

class MatmulDesc {
 public:
  MatmulDesc(cublasComputeType_t compute, cudaDataType_t scale) {
    cublasLtMatmulDesc_t d = nullptr;
    check(cublasLtMatmulDescCreate(&d, compute, scale), "cublasLtMatmulDescCreate");
    handle_ = Owned(d);
  }
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    check(cublasLtMatmulDescSetAttribute(get(), attr, &value, sizeof(value)),
          "cublasLtMatmulDescSetAttribute");
  }
  cublasLtMatmulDesc_t get() const { return handle_.get(); }

 private:
  using Owned = UniqueHandle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
  Owned handle_;
};

// A column-major rows x cols matrix (cuBLAS's view of a row-major cols x rows one).
class MatrixLayout {
 public:
  MatrixLayout(cudaDataType_t type, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
    cublasLtMatrixLayout_t d = nullptr;
    check(cublasLtMatrixLayoutCreate(&d, type, static_cast<std::uint64_t>(rows),
                                     static_cast<std::uint64_t>(cols), ld),
          "cublasLtMatrixLayoutCreate");
    handle_ = Owned(d);
  }
  cublasLtMatrixLayout_t get() const { return handle_.get(); }

 private:
  using Owned = UniqueHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
  Owned handle_;
};

class MatmulPreference {
 public:
  explicit MatmulPreference(std::size_t workspace_bytes) {
    cublasLtMatmulPreference_t d = nullptr;
    check(cublasLtMatmulPreferenceCreate(&d), "cublasLtMatmulPreferenceCreate");
    handle_ = Owned(d);
    check(cublasLtMatmulPreferenceSetAttribute(d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &workspace_bytes, sizeof(workspace_bytes)),
          "cublasLtMatmulPreferenceSetAttribute");
  }
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
    check(cublasLtMatmulPreferenceSetAttribute(get(), attr, &value, sizeof(value)),
          "cublasLtMatmulPreferenceSetAttribute");
  }
  cublasLtMatmulPreference_t get() const { return handle_.get(); }

 private:
  using Owned = UniqueHandle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;
  Owned handle_;
};

}  // namespace trainer::cuda
