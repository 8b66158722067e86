// labels: gpu
// The NCCL collective on one GPU (world 1, no MPI): the communicator comes
// up, the grouped all-reduce leaves the gradients as they are (the sum over
// one rank) and completes within the watchdog, so does the all-reduce of
// SyncBN's double sums in device memory, host reductions are no-ops.
#include <catch2/catch.hpp>

#include <vector>

#include "gpu_skip.h"
#include "ops/device_buffer.h"
#include "runner/dist/nccl_collective.h"

#ifdef TRAINER_WITH_CUDA
#include "ops/cuda/cuda_backend.h"

TEST_CASE("NCCL all-reduce on one GPU") {
  using namespace trainer;
  Backend& gpu = cuda_backend(0);
  auto collective = dist::make_nccl_collective(nullptr, 0, 60);
  CHECK(collective->world() == 1);
  CHECK(collective->is_root());
  CHECK(dist::nccl_version() != "0.0.0");  // the loaded library answered

  std::vector<float> a(1000), b(37);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * static_cast<float>(i);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = -1.0f * static_cast<float>(i);
  DeviceBuffer da(gpu, a.size() * 4), db(gpu, b.size() * 4);
  gpu.copy_to_device(da.data(), a.data(), a.size() * 4);
  gpu.copy_to_device(db.data(), b.data(), b.size() * 4);
  const std::vector<TensorRef> grads = {{da.data(), {1000}, DType::f32},
                                        {db.data(), {37}, DType::f32}};
  for (int step = 0; step < 3; ++step) collective->all_reduce_sum(grads);
  std::vector<float> ra(a.size()), rb(b.size());
  gpu.copy_to_host(ra.data(), da.data(), ra.size() * 4);
  gpu.copy_to_host(rb.data(), db.data(), rb.size() * 4);
  CHECK(ra == a);
  CHECK(rb == b);

  std::vector<double> values = {1.5, 2.5};
  collective->all_reduce_sum(values);
  CHECK(values == std::vector<double>{1.5, 2.5});
  // SyncBN's sums: doubles in device memory, reduced on the compute stream.
  const std::vector<double> sums = {1.25, -3.5, 1e300, 7.0};
  DeviceBuffer ds(gpu, sums.size() * sizeof(double));
  gpu.copy_to_device(ds.data(), sums.data(), sums.size() * sizeof(double));
  collective->all_reduce_device_statistics(static_cast<double*>(ds.data()), sums.size());
  std::vector<double> rs(sums.size());
  gpu.copy_to_host(rs.data(), ds.data(), rs.size() * sizeof(double));
  CHECK(rs == sums);
  collective->barrier();
}
#endif
