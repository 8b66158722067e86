# Finds every dependency from Debian packages; nothing is downloaded.
find_package(Threads REQUIRED)
find_package(dnnl REQUIRED)          # libdnnl-dev (oneDNN)
find_package(OpenMP REQUIRED COMPONENTS CXX)  # libgomp, the runtime oneDNN is built on
find_package(yaml-cpp REQUIRED)      # libyaml-cpp-dev
find_package(spdlog REQUIRED)        # libspdlog-dev (brings fmt)
find_package(nlohmann_json REQUIRED) # nlohmann-json3-dev
find_package(ZLIB REQUIRED)          # zlib1g-dev
find_package(PNG REQUIRED)           # libpng-dev
find_package(JPEG REQUIRED)          # libjpeg-dev
find_package(Catch2 REQUIRED)        # catch2 (v2)
find_package(MPI REQUIRED COMPONENTS CXX)  # libopenmpi-dev: data-parallel ranks (runner/dist)

# CLI11 ships a pkg-config file only; it is header-only.
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
if(NOT TARGET CLI11::CLI11)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()

# yaml-cpp 0.7 exports a plain `yaml-cpp` target.
if(NOT TARGET yaml-cpp AND TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp ALIAS yaml-cpp::yaml-cpp)
endif()

# CUDA: AUTO builds ops/cuda when the toolkit, cuDNN and NCCL are all found.
set(TRAINER_HAVE_CUDA OFF)
if(NOT TRAINER_CUDA STREQUAL "OFF")
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_TARGET_DIR}/lib64)
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_TARGET_DIR}/lib64)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  if(CUDAToolkit_FOUND AND CUDNN_LIBRARY AND CUDNN_INCLUDE_DIR AND NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
    set(TRAINER_HAVE_CUDA ON)
  elseif(TRAINER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TRAINER_CUDA=ON but the CUDA toolkit, cuDNN or NCCL was not found "
                        "(toolkit: ${CUDAToolkit_FOUND}, cuDNN: ${CUDNN_LIBRARY}, NCCL: ${NCCL_LIBRARY}). "
                        "Set CUDAToolkit_ROOT, or configure with -DTRAINER_CUDA=OFF.")
  endif()
endif()
message(STATUS "trainer: CUDA backend ${TRAINER_HAVE_CUDA}")
