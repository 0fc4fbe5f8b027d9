// See Note [Flight recorder] (recorder.h) and flight_record.h.
#include "trace/flight_record.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/env.h"
#include "trace/recorder.h"

namespace chorus::trace {
namespace {

std::string humanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

// "allreduce #7 (float32 x 1024, sum; 4.0 KiB) on group [0, 1] (shm)", "send to rank 3 (...)".
std::string describe(const Record& record) {
  const Fingerprint& f = record.fingerprint;
  const bool onDevice = record.detail >= 0 && (record.detail & kDeviceBit) != 0;
  std::string text;
  if (f.collective == Collective::kPointToPoint && onDevice) {
    text = "send/recv (" + humanBytes(record.bytes) + ")";
  } else if (f.collective == Collective::kPointToPoint) {
    const bool send = (record.detail & kSendBit) != 0;
    const int64_t peer = record.detail & (kSendBit - 1);
    text = std::string(send ? "send to rank " : "recv from ") +
           (peer == kAnyRank ? "any rank" : (send ? "" : "rank ") + std::to_string(peer)) + " (" +
           humanBytes(record.bytes) + ")";
  } else {
    text = f.describe();  // "allreduce #7 (float32 x 1024, sum)" or "barrier #3"
    if (text.back() == ')') {
      text.pop_back();
      text += "; " + humanBytes(record.bytes) + ")";
    } else {
      text += " (" + humanBytes(record.bytes) + ")";
    }
  }
  return text + (onDevice ? " on the GPU, in " : " on ") + groupDescription(record.group);
}

std::string joined(const std::vector<std::string>& items, const char* last) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0)
      text += i + 1 == items.size() ? last : ", ";
    text += items[i];
  }
  return text;
}

}  // namespace

std::string standing(const std::vector<Record>& records) {
  std::vector<std::string> running;
  const Record* lastFinished = nullptr;
  for (const Record& record : records) {
    if (record.kind != RecordKind::kOperation)
      continue;
    if (record.running())
      running.push_back(describe(record));
    else if (lastFinished == nullptr || record.ticket > lastFinished->ticket)
      lastFinished = &record;
  }
  std::string text = running.empty() ? "in no operation" : "in " + joined(running, " and ");
  if (lastFinished != nullptr) {
    text += std::string("; last ") + (lastFinished->failed ? "failed " : "finished ") +
            describe(*lastFinished);
  } else {
    text += "; none finished";
  }
  return text;
}

bool dumpFlightRecord(const std::string& reason) noexcept {
  try {
    const auto directory = env::string("CHORUS_RECORDER_DIR");
    if (!directory || directory->empty())
      return false;
    const std::vector<Record> records = flightRecords();
    const int64_t now = monotonicNs();
    std::ostringstream out;
    out << standing(records) << "\n"
        << "reason: " << reason << "\n";
    for (const Record& record : records) {
      if (record.kind != RecordKind::kOperation)
        continue;
      out << "#" << record.ticket << " " << describe(record) << ": started "
          << static_cast<double>(now - record.startNs) / 1e9 << " s ago, ";
      if (record.running()) {
        out << "running\n";
        continue;
      }
      out << (record.failed ? "failed" : "finished");
      if (record.endKnown())
        out << " after " << static_cast<double>(record.endNs - record.startNs) / 1e6 << " ms";
      out << "\n";
    }
    const std::string file = *directory + "/rank" + std::to_string(rank()) + ".txt";
    const std::string partial = file + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream stream(partial, std::ios::trunc);
      stream << out.str();
      if (!stream.good())
        return false;
    }
    std::error_code error;
    std::filesystem::rename(partial, file, error);
    return !error;
  } catch (...) {
    return false;
  }
}

bool dumpFlightRecordOnFailure(const std::string& reason) noexcept {
  static std::atomic<bool> dumped{false};
  if (dumped.exchange(true))
    return false;
  return dumpFlightRecord(reason);
}

std::map<int, std::string> readStandings(const std::string& directory) {
  std::map<int, std::string> standings;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 9 || name.compare(0, 4, "rank") != 0 ||
        name.substr(name.size() - 4) != ".txt")
      continue;
    const std::string digits = name.substr(4, name.size() - 8);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::ifstream in(entry.path());
    std::string first;
    if (std::getline(in, first))
      standings[std::stoi(digits)] = first;
  }
  return standings;
}

std::vector<std::string> summarizeStandings(const std::map<int, std::string>& standings,
                                            int size,
                                            const std::map<int, std::string>& endings) {
  std::vector<std::pair<std::string, std::vector<std::string>>> places;  // in rank order
  for (const auto& [rank, text] : standings) {
    auto place = std::find_if(places.begin(), places.end(),
                              [&text](const auto& entry) { return entry.first == text; });
    if (place == places.end())
      place = places.insert(places.end(), {text, {}});
    place->second.push_back(std::to_string(rank));
  }
  std::vector<std::string> lines;
  for (const auto& [text, ranks] : places) {
    lines.push_back((ranks.size() == 1 ? "rank " : "ranks ") + joined(ranks, " and ") + ": " +
                    text);
  }
  for (int rank = 0; rank < size; ++rank) {
    if (standings.count(rank) != 0)
      continue;
    auto ending = endings.find(rank);
    lines.push_back("rank " + std::to_string(rank) + ": no flight record (" +
                    (ending != endings.end() ? ending->second : "it wrote none") + ")");
  }
  return lines;
}

}  // namespace chorus::trace
