// The shm backend's native collectives other than allreduce (see shm_backend.h).
#include "backend/shm/shm_backend.h"

namespace chorus::backend::shm {}  // namespace chorus::backend::shm
