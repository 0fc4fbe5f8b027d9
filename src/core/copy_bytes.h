// core/copy_bytes.h — copyBytes, memcpy for the bulk data paths without `rep movsb`'s aliasing
// stall (the public part: chorus/copy_bytes.h).
//
// Note [rep movsb and 4 KiB aliasing]
// glibc's memcpy copies sizes from a few KiB to about half a MiB with `rep movsb`. On the AMD EPYC
// machines chorus is measured on, `rep movsb` runs 12-15x slower when the destination lies 1-63
// bytes past the source modulo 4 KiB (one page): 256 KiB take 120-140 us instead of 8-10 us
// (glibc 2.36; newer glibc checks for this case, Debian 12's does not). A chunk slot of the shm
// backend starts on a page, and a NumPy array of that size starts 16 bytes into one (malloc's
// chunk header), so every copy-out of an allreduce into such an array hit the slow case: from
// Python, `allreduce(x, out=y)` of 1 MiB took 0.9 ms with y from NumPy and 0.15 ms with y from
// chorus. copyBytes takes memcpy, except in that window, where it copies with 16-byte vector
// loads and stores (measured equal to memcpy's good case, within 10%). The kernel's copies
// (process_vm_readv) stall the same way; ShmGroup::readFrom stages those.
#pragma once

#include "chorus/copy_bytes.h"  // copyBytes, copyAvoidsMemcpy, copyByVectors
