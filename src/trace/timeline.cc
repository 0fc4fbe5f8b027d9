// See Note [Timeline] (timeline.h).
#include "trace/timeline.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "trace/recorder.h"

namespace chorus::trace {
namespace {

std::string jsonString(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      quoted += escaped;
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

std::string microseconds(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", static_cast<double>(ns) / 1000.0);
  return text;
}

// "allreduce #7", "send to 3", "bucket 2".
std::string eventName(const Record& record) {
  if (record.kind == RecordKind::kMark) {
    std::string name = record.label != nullptr ? record.label : "mark";
    return record.detail >= 0 ? name + " " + std::to_string(record.detail) : name;
  }
  const Fingerprint& f = record.fingerprint;
  if (record.detail >= 0 && (record.detail & kDeviceBit) != 0) {
    if (f.collective == Collective::kPointToPoint)
      return "send/recv (cuda)";
    return std::string(toString(f.collective)) + " #" + std::to_string(f.sequence) + " (cuda)";
  }
  if (f.collective == Collective::kPointToPoint) {
    const bool send = (record.detail & kSendBit) != 0;
    const int64_t peer = record.detail & (kSendBit - 1);
    return std::string(send ? "send to " : "recv from ") +
           (peer == kAnyRank ? "any" : std::to_string(peer));
  }
  return std::string(toString(f.collective)) + " #" + std::to_string(f.sequence);
}

std::string eventArgs(const Record& record) {
  std::ostringstream args;
  if (record.kind == RecordKind::kMark) {
    args << "{\"index\":" << record.detail << "}";
    return args.str();
  }
  const Fingerprint& f = record.fingerprint;
  args << "{\"seq\":" << f.sequence << ",\"op\":" << jsonString(std::string(toString(f.collective)))
       << ",\"bytes\":" << record.bytes << ",\"count\":" << f.count;
  if (f.dataType != Fingerprint::kNoDataType)
    args << ",\"dtype\":" << jsonString(f.fieldValue("dtype"));
  if (f.reduceOp != Fingerprint::kNoReduceOp)
    args << ",\"reduce_op\":" << jsonString(f.fieldValue("reduce_op"));
  if (f.root >= 0)
    args << ",\"root\":" << f.root;
  args << ",\"algorithm\":" << int{f.algorithm}
       << ",\"group\":" << jsonString(groupDescription(record.group));
  if (record.detail >= 0 && (record.detail & kDeviceBit) != 0)
    args << ",\"device\":\"cuda\"";
  if (record.arrivedNs > 0)  // the backend saw every peer arrive this long after the start
    args << ",\"peers_arrived_after_us\":" << microseconds(record.arrivedNs - record.startNs);
  if (record.failed)
    args << ",\"failed\":true";
  args << "}";
  return args.str();
}

}  // namespace

std::string partPath(const std::string& path, int rank) {
  return path + ".rank" + std::to_string(rank) + ".part";
}

void writePart(const std::string& path,
               int rank,
               const std::vector<Record>& records,
               uint64_t dropped,
               int64_t offsetNs,
               int64_t stopNs) {
  std::ostringstream out;
  out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << rank << ",\"args\":{\"name\":\"rank "
      << rank << "\",\"dropped\":" << dropped << ",\"clock_offset_ns\":" << offsetNs << "}},\n"
      << "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" << rank
      << ",\"args\":{\"sort_index\":" << rank << "}},\n"
      << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << rank
      << ",\"tid\":0,\"args\":{\"name\":\"marks\"}}";
  std::vector<uint32_t> groups;
  for (const Record& record : records) {
    const bool mark = record.kind == RecordKind::kMark;
    const uint32_t lane = mark ? 0 : record.group + 1;
    if (!mark && std::find(groups.begin(), groups.end(), record.group) == groups.end()) {
      groups.push_back(record.group);
      out << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << rank << ",\"tid\":" << lane
          << ",\"args\":{\"name\":" << jsonString(groupDescription(record.group)) << "}}";
    }
    const int64_t end = record.running() ? stopNs : record.endNs;
    out << ",\n{\"name\":" << jsonString(eventName(record)) << ",\"cat\":\""
        << (mark ? "mark" : "operation") << "\",\"ph\":\"X\",\"pid\":" << rank
        << ",\"tid\":" << lane << ",\"ts\":" << microseconds(record.startNs + offsetNs)
        << ",\"dur\":" << microseconds(std::max<int64_t>(0, end - record.startNs))
        << ",\"args\":" << eventArgs(record) << "}";
  }
  const std::string file = partPath(path, rank);
  std::ofstream stream(file, std::ios::trunc);
  stream << out.str() << "\n";
  stream.close();
  CHORUS_CHECK_ARG(stream.good(), "rank ", rank, " (this process): cannot write the trace part '",
                   file, "' (CHORUS_TRACE names a file in a directory this rank can write)");
}

int mergeParts(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".rank";
  std::vector<std::pair<long, fs::path>> parts;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() + 5 || name.compare(0, prefix.size(), prefix) != 0 ||
        name.substr(name.size() - 5) != ".part")
      continue;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - 5);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit))
      continue;
    parts.emplace_back(std::stol(digits), entry.path());
  }
  if (parts.empty())
    return 0;
  std::sort(parts.begin(), parts.end());
  std::ofstream out(path, std::ios::trunc);
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  for (size_t i = 0; i < parts.size(); ++i) {
    std::ifstream in(parts[i].second);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    while (!text.empty() && (text.back() == '\n' || text.back() == ',')) text.pop_back();
    out << (i > 0 ? ",\n" : "") << text;
  }
  out << "\n]}\n";
  out.close();
  CHORUS_CHECK_ARG(out.good(), "cannot write the merged trace '", path, "'");
  for (const auto& part : parts) fs::remove(part.second, error);
  return static_cast<int>(parts.size());
}

}  // namespace chorus::trace
