// Two data-parallel ranks in one process, one thread each: the Collective a
// kernel test gives two kernels so that their all_reduce_statistics calls add
// both threads' values (in rank order), as MPI ranks would. The other
// collectives are not used by kernels.
#pragma once

#include <barrier>
#include <vector>

#include "ops/collective.h"

namespace trainer::testing {

struct Exchange {
  std::barrier<> meet{2};
  std::vector<double> slot[2];
};

class ThreadRank final : public Collective {
 public:
  ThreadRank(Exchange& exchange, int rank) : exchange_(exchange), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return 2; }
  void all_reduce_sum(const std::vector<TensorRef>&) override {}
  void all_reduce_sum(std::vector<double>&) override {}
  void all_reduce_statistics(std::vector<double>& values) override {
    ++calls;
    exchange_.slot[rank_] = values;
    exchange_.meet.arrive_and_wait();
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = exchange_.slot[0][i] + exchange_.slot[1][i];
    exchange_.meet.arrive_and_wait();  // both have read the slots
  }
  void barrier() override { exchange_.meet.arrive_and_wait(); }
  int calls = 0;  // all_reduce_statistics calls

 private:
  Exchange& exchange_;
  int rank_;
};

}  // namespace trainer::testing
