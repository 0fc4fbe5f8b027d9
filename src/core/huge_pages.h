// core/huge_pages.h — transparent huge pages for large private buffers.
//
// On the VMs chorus is measured on, the first touch of each fresh 4 KiB page costs microseconds,
// so a buffer of tens of MiB spends most of its first use in page faults; 2 MiB pages cut that
// 512-fold. Advice only: the kernel (/sys/kernel/mm/transparent_hugepage) decides, and failures
// are ignored.
#pragma once

#include <cstddef>

#include "chorus/huge_pages.h"  // adviseHugePages, the public part

namespace chorus {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

}  // namespace chorus
