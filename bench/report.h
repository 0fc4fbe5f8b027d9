// What chorus-bench prints: rank 0's table per collective (nccl-tests style; with --compare mpi,
// MPI's columns and the speedup beside chorus's) and the optional --csv file with the same values,
// one line per row, for bench/plot.py. Only rank 0 makes a Report.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "collective.h"
#include "options.h"

namespace chorus::bench {

// One timed implementation of one row.
struct Measurement {
  double seconds = 0.0;  // median
  double algBw = 0.0;    // GB/s
  double busBw = 0.0;    // GB/s
  int64_t wrong = 0;     // summed over ranks; meaningful with --check only
};

// Bandwidths of `seconds` for `shape` with the collective's bus factor at `ranks`.
Measurement measurementOf(double seconds, const Shape& shape, double busBwFactor);

// What a table is about; `reference` is empty without --compare.
struct TableInfo {
  const Collective* collective = nullptr;
  int ranks = 0;
  std::string backend;    // the chorus backend that ran, Communicator::backendName()
  std::string reference;  // e.g. "MPI_Allreduce of Open MPI v4.1.4"
};

class Report {
 public:
  // Opens `options.csvPath` (when set) and writes its header line; throws chorus::Error naming
  // the file when it cannot be written.
  explicit Report(const BenchOptions& options);
  ~Report();
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;

  void beginTable(const TableInfo& info);
  // `reference` is set exactly when the table has a reference.
  void row(const Shape& shape,
           const Measurement& chorus,
           const std::optional<Measurement>& reference);
  // The footer: wrong elements and the mean bus bandwidth of the table's rows.
  void endTable();

 private:
  void printColumnHeads() const;
  void writeCsvRow(const Shape& shape,
                   const Measurement& chorus,
                   const std::optional<Measurement>& reference);

  const BenchOptions& options_;
  std::FILE* csv_ = nullptr;
  TableInfo table_;
  int64_t rows_ = 0;
  int64_t wrong_ = 0;
  int64_t referenceWrong_ = 0;
  double busBwSum_ = 0.0;
  double referenceBusBwSum_ = 0.0;
};

}  // namespace chorus::bench
