// ProcessWatch: tells whether another process on this node has terminated.
//
// Contract:
//  - Constructed from a pid that is alive at the time (a peer rank met during setup). gone() is
//    true once that process has terminated, even while it is still a zombie that nobody has
//    reaped (chorusrun keeps its ranks' zombies until the job ends, so `kill(pid, 0)` would still
//    succeed), and it never confuses the peer with a later process that reuses its pid.
//  - It uses a pidfd (Linux >= 5.3), which becomes readable when the process exits. Where pidfds
//    are unavailable (an old kernel, a pid from another pid namespace, a seccomp filter), it falls
//    back to `kill(pid, 0)`, which misses zombies.
//  - gone() costs one poll() system call; it never blocks. Thread-safe (const, no state changes).
#pragma once

#include <sys/types.h>

namespace chorus {

class ProcessWatch {
 public:
  ProcessWatch() = default;
  explicit ProcessWatch(pid_t pid);
  ~ProcessWatch();
  ProcessWatch(ProcessWatch&& other) noexcept;
  ProcessWatch& operator=(ProcessWatch&& other) noexcept;
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  pid_t pid() const { return pid_; }
  // True once the watched process has terminated. False for a default-constructed watch.
  bool gone() const;

 private:
  pid_t pid_ = 0;
  int pidfd_ = -1;
};

}  // namespace chorus
