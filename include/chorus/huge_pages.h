// chorus/huge_pages.h — advice for large buffers that a program is about to fill: transparent huge
// pages.
//
// Contract:
//  - adviseHugePages(data, bytes) asks the kernel to back the 2 MiB-aligned interior of
//    [data, data + bytes) with huge pages (madvise MADV_HUGEPAGE); a range that holds no whole
//    2 MiB page is left alone. Call it before the buffer is first touched: on the VMs chorus is
//    measured on, the first touch of each fresh 4 KiB page costs microseconds, so a buffer of tens
//    of MiB would otherwise spend most of its first use in page faults.
//  - Advice only: the kernel (/sys/kernel/mm/transparent_hugepage) decides, and every failure is
//    ignored. The contents and ownership of the memory are unchanged; the caller keeps owning it.
//  - Thread-safe, never throws, and does not wait on anything but the system call.
#pragma once

#include <cstddef>

namespace chorus {

void adviseHugePages(void* data, size_t bytes) noexcept;

}  // namespace chorus
