// Lock annotations that clang's -Wthread-safety checks (they expand to nothing under GCC).
//
//   std::mutex mutex_;
//   int count_ CHORUS_GUARDED_BY(mutex_);
#pragma once

#if defined(__clang__)
#define CHORUS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define CHORUS_THREAD_ANNOTATION(x)
#endif

#define CHORUS_GUARDED_BY(mutex) CHORUS_THREAD_ANNOTATION(guarded_by(mutex))
#define CHORUS_PT_GUARDED_BY(mutex) CHORUS_THREAD_ANNOTATION(pt_guarded_by(mutex))
#define CHORUS_REQUIRES(...) CHORUS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define CHORUS_EXCLUDES(...) CHORUS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
