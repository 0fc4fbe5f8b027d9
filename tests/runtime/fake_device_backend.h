// FakeDeviceBackend: a stand-in for the nccl backend in unit tests of the runtime's device path
// (its host check, its watchdog), on machines without a GPU. Installed with
// installFakeDeviceBackend(), which routes backend::createDeviceBackend to it for this process.
//
// It moves no data between ranks: each collective only counts the call. What it imitates is the
// part of a real device backend those tests are about: work that ends later than the call (or
// never: setFakeDeviceHangs(true) imitates an NCCL kernel waiting for a dead or absent peer), a
// completion that raises the reason once the backend is aborted (as ncclCommAbort ends NCCL's
// kernels), and abort() from any thread. Staging (scratch, copy, copyRows) works on host memory,
// so the "CUDA" tensors of these tests are host memory labelled Device::cuda(0).
#pragma once

namespace chorus::testing {

void installFakeDeviceBackend();
// Whether the work of later calls never ends on its own (until an abort); per process. As on a
// stream, once some work never ends, no later work of that backend ends either.
void setFakeDeviceHangs(bool hangs);
// Whether work that never ends stays running on the "device" after an abort, as an NCCL kernel
// does until it sees the abort: its completion then raises the failure, while deviceStopped()
// stays false until this is set back to false (default: it stops at the abort). Per process.
void setFakeDeviceStopsLate(bool late);
// Whether every completion now fails as NCCL's does once a peer's socket closes: a PeerError that
// names no rank. Per process.
void setFakeDevicePeerGone(bool gone);
// Whether later enqueues wait, as NCCL's does while it connects a first collective's peers, until
// the backend is aborted or the call's deadline passes. Per process.
void setFakeDeviceConnectWaits(bool waits);
// The rank (of the fake's communicator) whose enqueues fail with InvalidArgumentError, as NCCL's
// do for a bad pointer; -1 for none. Per process. The fake also refuses bxor up front
// (checkSupported), as the nccl backend does.
void setFakeDeviceEnqueueFailsOn(int rank);
// Device collectives the fakes of this process were given, and how many of them the runtime asked
// to run on the caller's stream (blocking calls).
int fakeDeviceCalls();
int fakeDeviceCallsOnCallerStream();
// Fakes made through createDeviceBackend (a rendezvous), and split() calls, in this process.
int fakeDeviceBackendsMade();
int fakeDeviceSplits();

}  // namespace chorus::testing
