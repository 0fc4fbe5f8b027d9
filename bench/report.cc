// chorus-bench's table and CSV output (see report.h).
#include "report.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "chorus/error.h"

namespace chorus::bench {
namespace {

// What the reference column is called: "NCCL" with --compare nccl, else "MPI".
const char* referenceLabel(const BenchOptions& options) {
  return options.compareNccl ? "NCCL" : "MPI";
}

constexpr const char* kCsvHeader =
    "collective,ranks,dtype,reduce_op,root,backend,reference,size_bytes,count,time_us,algbw_gbps,"
    "busbw_gbps,wrong,ref_time_us,ref_algbw_gbps,ref_busbw_gbps,ref_wrong,speedup\n";

std::string describeBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int unit = 0;
  while (unit < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + units[unit];
}

// "N/A" without --check.
std::string wrongText(const BenchOptions& options, int64_t wrong) {
  return options.check ? std::to_string(wrong) : "N/A";
}

// MPI time over chorus time: above 1 chorus is faster.
double speedupOf(const Measurement& chorus, const Measurement& reference) {
  return chorus.seconds > 0.0 ? reference.seconds / chorus.seconds : 0.0;
}

// `text` as one CSV field: quoted (inner quotes doubled) when it holds a comma or a quote, as the
// GPU backend's description does ("nccl (CUDA tensors, cuda:0 on rank 0)").
std::string csvField(const std::string& text) {
  if (text.find_first_of(",\"") == std::string::npos)
    return text;
  std::string quoted = "\"";
  for (char c : text) {
    quoted += c;
    if (c == '"')
      quoted += '"';
  }
  return quoted + '"';
}

}  // namespace

Measurement measurementOf(double seconds, const Shape& shape, double busBwFactor) {
  Measurement result;
  result.seconds = seconds;
  result.algBw = seconds > 0.0 ? static_cast<double>(shape.bytes) / seconds / 1e9 : 0.0;
  result.busBw = result.algBw * busBwFactor;
  return result;
}

Report::Report(const BenchOptions& options) : options_(options) {
  if (options.csvPath.empty()) {
    return;
  }
  csv_ = std::fopen(options.csvPath.c_str(), "w");
  if (csv_ == nullptr) {
    throw Error("chorus-bench rank 0: cannot write --csv file '" + options.csvPath +
                "': " + std::strerror(errno) + "; name a file in a writable directory");
  }
  std::fputs(kCsvHeader, csv_);
}

Report::~Report() {
  if (csv_ != nullptr) {
    std::fclose(csv_);
  }
}

void Report::beginTable(const TableInfo& info) {
  table_ = info;
  rows_ = wrong_ = referenceWrong_ = 0;
  busBwSum_ = referenceBusBwSum_ = 0.0;
  const Collective& c = *info.collective;
  std::printf("# chorus-bench: %s, %d ranks, dtype %s", std::string(c.name).c_str(), info.ranks,
              std::string(toString(options_.dtype)).c_str());
  if (c.reduces) {
    std::printf(", reduce-op %s", std::string(toString(options_.reduceOp)).c_str());
  }
  if (c.rooted) {
    std::printf(", root %d", options_.root);
  }
  std::printf("\n# backend: %s\n", info.backend.c_str());
  if (!info.reference.empty()) {
    std::printf(
        "# compare: %s on the same buffers, timed loops alternating with chorus's;\n"
        "#          speedup = %s time / chorus time (above 1: chorus is faster)\n",
        info.reference.c_str(), referenceLabel(options_));
  }
  if (c.sweeps) {
    std::printf("# sizes %s .. %s (x%lld), ", describeBytes(options_.minBytes).c_str(),
                describeBytes(options_.maxBytes).c_str(), static_cast<long long>(options_.factor));
  } else {
    std::printf("# ");
  }
  std::printf("iters %d (fewer above 16 MiB), warmup %d, repeats %d, check %s\n", options_.iters,
              options_.warmup, options_.repeats, options_.check ? "on" : "off");
  printColumnHeads();
  std::fflush(stdout);
}

void Report::printColumnHeads() const {
  std::printf("#\n# %10s %12s %12s %12s %12s %8s", "size", "count", "time", "algbw", "busbw",
              "#wrong");
  if (!table_.reference.empty()) {
    const std::string ref = options_.compareNccl ? "nccl" : "mpi";
    std::printf(" %12s %12s %12s %8s %8s", (ref + " time").c_str(), (ref + " algbw").c_str(),
                (ref + " busbw").c_str(), (ref + " #wr").c_str(), "speedup");
  }
  std::printf("\n# %10s %12s %12s %12s %12s", "(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)");
  if (!table_.reference.empty()) {
    std::printf(" %8s %12s %12s %12s %8s %8s", "", "(us)", "(GB/s)", "(GB/s)", "", "(x)");
  }
  std::printf("\n");
}

void Report::row(const Shape& shape,
                 const Measurement& chorus,
                 const std::optional<Measurement>& reference) {
  ++rows_;
  wrong_ += chorus.wrong;
  busBwSum_ += chorus.busBw;
  std::printf("  %10lld %12lld %12.1f %12.4f %12.4f %8s", static_cast<long long>(shape.bytes),
              static_cast<long long>(shape.count), chorus.seconds * 1e6, chorus.algBw, chorus.busBw,
              wrongText(options_, chorus.wrong).c_str());
  if (reference) {
    referenceWrong_ += reference->wrong;
    referenceBusBwSum_ += reference->busBw;
    std::printf(" %12.1f %12.4f %12.4f %8s %8.2f", reference->seconds * 1e6, reference->algBw,
                reference->busBw, wrongText(options_, reference->wrong).c_str(),
                speedupOf(chorus, *reference));
  }
  std::printf("\n");
  std::fflush(stdout);
  writeCsvRow(shape, chorus, reference);
}

void Report::writeCsvRow(const Shape& shape,
                         const Measurement& chorus,
                         const std::optional<Measurement>& reference) {
  if (csv_ == nullptr) {
    return;
  }
  const Collective& c = *table_.collective;
  std::string wrong = options_.check ? std::to_string(chorus.wrong) : "";
  std::fprintf(csv_, "%s,%d,%s,%s,%d,%s,%s,%lld,%lld,%.3f,%.6f,%.6f,%s",
               std::string(c.name).c_str(), table_.ranks,
               std::string(toString(options_.dtype)).c_str(),
               c.reduces ? std::string(toString(options_.reduceOp)).c_str() : "",
               c.rooted ? options_.root : -1, csvField(table_.backend).c_str(),
               csvField(table_.reference).c_str(), static_cast<long long>(shape.bytes),
               static_cast<long long>(shape.count), chorus.seconds * 1e6, chorus.algBw,
               chorus.busBw, wrong.c_str());
  if (reference) {
    std::string referenceWrong = options_.check ? std::to_string(reference->wrong) : "";
    std::fprintf(csv_, ",%.3f,%.6f,%.6f,%s,%.4f\n", reference->seconds * 1e6, reference->algBw,
                 reference->busBw, referenceWrong.c_str(), speedupOf(chorus, *reference));
  } else {
    std::fputs(",,,,,\n", csv_);
  }
  std::fflush(csv_);
}

void Report::endTable() {
  std::printf("# wrong elements: %lld", static_cast<long long>(wrong_));
  if (!table_.reference.empty()) {
    std::printf(" (%s: %lld)", referenceLabel(options_), static_cast<long long>(referenceWrong_));
  }
  std::printf("\n");
  if (table_.collective->sweeps && rows_ > 0) {
    std::printf("# avg bus bandwidth: %.4f GB/s", busBwSum_ / static_cast<double>(rows_));
    if (!table_.reference.empty()) {
      std::printf(" (%s: %.4f GB/s)", referenceLabel(options_),
                  referenceBusBwSum_ / static_cast<double>(rows_));
    }
    std::printf("\n");
  }
  std::printf("#\n");
  std::fflush(stdout);
}

}  // namespace chorus::bench
