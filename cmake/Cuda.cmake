# The CUDA backend (ops/cuda): cuDNN, cuBLASLt, NCCL and our own kernels.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS ${CUDAToolkit_BIN_DIR}/nvcc)
  set(CMAKE_CUDA_COMPILER ${CUDAToolkit_BIN_DIR}/nvcc)
endif()
enable_language(CUDA)
# CMake 3.25 does not know that nvcc 13 speaks C++20: tell it the flag.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)

file(GLOB TRAINER_CUDA_SOURCES CONFIGURE_DEPENDS ops/cuda/*.cpp ops/cuda/*.cu)
add_library(trainer_ops_cuda ${TRAINER_CUDA_SOURCES})
target_include_directories(trainer_ops_cuda PUBLIC ${CUDNN_INCLUDE_DIR} ${NCCL_INCLUDE_DIR})
target_link_libraries(trainer_ops_cuda PUBLIC trainer_ops CUDA::cudart CUDA::cublas CUDA::cublasLt
                                              ${CUDNN_LIBRARY} ${NCCL_LIBRARY})
set_target_properties(trainer_ops_cuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
target_compile_options(trainer_ops_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra>)
trainer_warnings(trainer_ops_cuda)
