// GatheredUnits (see gathered_units.h).
#include "parallel/gathered_units.h"

#include <exception>
#include <utility>

#include "parallel/wait_all.h"

namespace chorus::parallel {

// Note [Released units keep their address]
// Stage 3 releases a unit after its module has run, but the memory did not go with it while
// anything viewed it, and autograd does: forward saves views of the weights it used (F.linear
// saves weight.t()) until backward. With a fresh buffer per gather, every released unit whose
// views autograd kept stayed in memory from forward to backward, and backward's gathers came on
// top. So each unit keeps one buffer, and a release returns the buffer's pages to the system
// (madvise MADV_DONTNEED) instead of freeing it: the views stay valid and cost nothing, and the
// next gather writes the unit back at the same address before the module's backward reads it
// (chorus.torch's stage-3 hooks gather it when the gradient of the module's output arrives).
// Torch's FSDP does the same to its flat parameters by resizing their storage to nothing.
// A first touch of a page costs 1-10 us either way: a fresh buffer was zeroed, this one is
// faulted back in by the allgather's writes.

GatheredUnits::GatheredUnits(std::vector<size_t> unitBytes, std::shared_ptr<BufferAccount> account)
    : bytes_(std::move(unitBytes)),
      buffers_(bytes_.size()),
      resident_(bytes_.size(), false),
      works_(bytes_.size()),
      account_(std::move(account)) {}

GatheredUnits::~GatheredUnits() {
  std::vector<std::shared_ptr<Work>> running;
  for (auto& work : works_)
    if (work)
      running.push_back(std::move(work));
  try {
    waitAll(running);
  } catch (const std::exception&) {  // already reported, or never asked for
  }
}

void GatheredUnits::gather(int unit, const Start& start) {
  if (resident_.at(unit))
    return;
  if (!buffers_[unit])
    buffers_[unit] = std::make_shared<AlignedBuffer>(bytes_[unit], "ZeRO: a gathered unit");
  resident_[unit] = true;
  account_->add(bytes_[unit]);
  works_[unit] = start(buffers_[unit]->data());
}

void GatheredUnits::wait(int unit) {
  if (auto work = std::move(works_.at(unit))) {
    try {
      work->wait();
    } catch (...) {
      release(unit);
      throw;
    }
  }
}

void GatheredUnits::release(int unit) {
  std::exception_ptr failure;
  if (auto work = std::move(works_.at(unit))) {
    try {
      work->wait();  // the allgather writes into the buffer until it completes
    } catch (...) {
      failure = std::current_exception();  // it has ended: the memory can go all the same
    }
  }
  if (resident_[unit]) {
    resident_[unit] = false;
    buffers_[unit]->discard();
    account_->remove(bytes_[unit]);
  }
  if (failure)
    std::rethrow_exception(failure);
}

bool GatheredUnits::isGathered(int unit) const { return resident_.at(unit) && !works_.at(unit); }

}  // namespace chorus::parallel
