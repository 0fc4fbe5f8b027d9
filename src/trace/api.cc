// The public face of the trace layer (include/chorus/trace.h).
#include <mutex>

#include "chorus/trace.h"
#include "trace/recorder.h"
#include "trace/timeline.h"

namespace chorus::trace {
namespace {

std::mutex pathMutex;
std::string recordingPath;  // guarded by pathMutex

}  // namespace

bool start(const std::string& path, size_t capacity) {
  std::lock_guard lock(pathMutex);
  if (!startTimeline(capacity))
    return false;
  recordingPath = path;
  return true;
}

std::string stop() {
  std::lock_guard lock(pathMutex);
  if (recordingPath.empty())
    return "";
  uint64_t dropped = 0;
  const std::vector<Record> records = stopTimeline(dropped);
  const std::string path = recordingPath;
  recordingPath.clear();
  writePart(path, rank(), records, dropped, clockOffset(), monotonicNs());
  return partPath(path, rank());
}

bool active() { return timelineActive(); }

std::string path() {
  std::lock_guard lock(pathMutex);
  return recordingPath;
}

int merge(const std::string& path) { return mergeParts(path); }

Span::Span(const char* label, int64_t index) noexcept : ring_(nullptr), ticket_(0) {
  if (!timelineActive())
    return;
  const Ticket ticket = beginMark(label, index);
  ring_ = ticket.timeline;
  ticket_ = ticket.timelineTicket;
}

Span::~Span() {
  if (ring_ != nullptr)
    end(Ticket{0, static_cast<OperationRing*>(ring_), ticket_}, false);
}

}  // namespace chorus::trace
