// The out-of-place check of one backend rank, shared by tests/runtime/backend_out_of_place_test.cc
// (ranks as threads) and tests/mpi/mpi_out_of_place_test.cc (ranks under mpirun): allreduce at
// 0, 7, 100000 and 300000 floats (small, direct and chunked paths) and broadcast from every root,
// each with input and output in different buffers, and broadcast with the root's output
// overlapping its input. The output must hold the closed-form result and the input must be left as
// it was. GoogleTest assertions; call from a test body's thread.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "backend/backend.h"

namespace chorus::testing {

// Rank r's value at index i: small integers, so float sums are exact.
inline float outOfPlaceValue(int rank, size_t i) {
  return static_cast<float>((i * 5 + rank * 3) % 13) - 6;
}

inline backend::CallContext outOfPlaceCall(uint64_t sequence,
                                           Collective collective,
                                           size_t count,
                                           int root = -1) {
  Fingerprint fingerprint;
  fingerprint.sequence = sequence;
  fingerprint.collective = collective;
  fingerprint.count = count;
  fingerprint.root = root;
  return backend::CallContext{fingerprint, Deadline::after(std::chrono::seconds(60))};
}

// A broadcast of `count` floats from each root whose output starts a quarter of the way into its
// input, in one buffer (copyToOutput: overlap allowed); the other ranks receive into a buffer of
// their own.
inline void checkOverlappingBroadcast(
    backend::Backend& engine, int rank, int size, size_t count, uint64_t& sequence) {
  const size_t shift = count / 4;
  for (int root = 0; root < size; ++root) {
    std::vector<float> buffer(count + shift, -1000.0f);
    for (size_t i = 0; rank == root && i < count; ++i) buffer[i] = outOfPlaceValue(root, i);
    float* output = rank == root ? buffer.data() + shift : buffer.data();
    engine.broadcast(outOfPlaceCall(++sequence, Collective::kBroadcast, count * 4, root),
                     {buffer.data(), output, count * 4, root});
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(output[i], outOfPlaceValue(root, i))
          << "overlapping broadcast from " << root << ", count " << count << ", index " << i;
    }
  }
}

// Rank `rank` of `size`: every call out of place on `engine`, checked.
inline void checkOutOfPlace(backend::Backend& engine, int rank, int size) {
  uint64_t sequence = 0;
  for (size_t count : {size_t{0}, size_t{7}, size_t{100000}, size_t{300000}}) {
    std::vector<float> input(count);
    for (size_t i = 0; i < count; ++i) input[i] = outOfPlaceValue(rank, i);
    const std::vector<float> original = input;
    std::vector<float> output(count, -1000.0f);
    engine.allreduce(outOfPlaceCall(++sequence, Collective::kAllreduce, count),
                     {input.data(), output.data(), count, DataType::kFloat32, ReduceOp::kSum});
    EXPECT_EQ(input, original) << "allreduce changed its input, count " << count;
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < size; ++r) expected += outOfPlaceValue(r, i);
      ASSERT_EQ(output[i], expected) << "allreduce, count " << count << ", index " << i;
    }
    for (int root = 0; root < size; ++root) {
      std::vector<float> received(count, -1000.0f);
      engine.broadcast(outOfPlaceCall(++sequence, Collective::kBroadcast, count * 4, root),
                       {input.data(), received.data(), count * 4, root});
      EXPECT_EQ(input, original) << "broadcast changed its input, count " << count;
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(received[i], outOfPlaceValue(root, i))
            << "broadcast from " << root << ", count " << count << ", index " << i;
      }
    }
    checkOverlappingBroadcast(engine, rank, size, count, sequence);
  }
}

}  // namespace chorus::testing
