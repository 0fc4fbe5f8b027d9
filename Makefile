# The two commands a newcomer needs:
#   make demo   builds chorus, runs the seed examples (C++, then Python) on 4 ranks (one node, no MPI),
#               then the main job: data-parallel training on scikit-learn's digits (train_digits.py),
#               once with DistributedDataParallel and once with ZeRO stage 3
#   make test   builds chorus and runs the whole test suite, the fuzz targets briefly, and the
#               multi-rank C++ tests under ASan+UBSan and TSan
# Each installs the Debian packages it needs first (scripts/install-deps.sh).

BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
NP ?= 4

.PHONY: all deps configure build demo test fuzz soak torch-suite install format format-check clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	$(BUILD)/bin/chorusrun -np $(NP) $(BUILD)/bin/allreduce
	PYTHONPATH=$(BUILD)/python $(BUILD)/bin/chorusrun -np $(NP) /usr/bin/python3 examples/python/allreduce.py
	PYTHONPATH=$(BUILD)/python $(BUILD)/bin/chorusrun -np $(NP) /usr/bin/python3 examples/python/train_digits.py
	PYTHONPATH=$(BUILD)/python $(BUILD)/bin/chorusrun -np $(NP) /usr/bin/python3 examples/python/train_digits.py --zero 3

# The whole suite; then a short run of every fuzz target (fuzz/, built with clang); then the
# multi-rank and unit C++ tests built with AddressSanitizer + UBSan, and with ThreadSanitizer
# (scripts/sanitize.sh: their own build directories, no Python or MPI there).
test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 600
	fuzz/run.sh 10 $(BUILD)/fuzz
	scripts/sanitize.sh asan $(BUILD)-asan
	scripts/sanitize.sh tsan $(BUILD)-tsan

# libFuzzer targets for the store and transport parsers: FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 300
fuzz: deps
	fuzz/run.sh $(FUZZ_SECONDS) $(BUILD)/fuzz

# The randomized soak (tests/soak/soak.py): every configuration (shm, tcp and mpi at 2, 3, 4 and 8
# ranks, hierarchical over two launchers, with a CPU hog, with transport delays, with a killed
# rank) for about SOAK_SECONDS in all; prints a table per configuration and fails on any wrong
# result, hang, false error or fault not named. `make test` runs a 60 s slice of it (ctest soak_slice).
SOAK_SECONDS ?= 600
soak: build
	/usr/bin/python3 tests/soak/soak.py --build $(BUILD) --seconds $(SOAK_SECONDS)

# PyTorch's own distributed suite (tests/torch_suite/run_torch_suite.py) against the chorus
# torch.distributed backend, against chorus posing as gloo (every test torch gates to gloo by name
# runs on chorus) and against gloo, WORLD_SIZE ranks each; the last lines of each run give its
# counts (docs/torch.md).
WORLD_SIZE ?= 2
torch-suite: build
	-BACKEND=chorus WORLD_SIZE=$(WORLD_SIZE) PYTHONPATH=$(BUILD)/python /usr/bin/python3 \
		tests/torch_suite/run_torch_suite.py
	-BACKEND=chorus-as-gloo WORLD_SIZE=$(WORLD_SIZE) PYTHONPATH=$(BUILD)/python /usr/bin/python3 \
		tests/torch_suite/run_torch_suite.py
	-BACKEND=gloo WORLD_SIZE=$(WORLD_SIZE) PYTHONPATH=$(BUILD)/python /usr/bin/python3 \
		tests/torch_suite/run_torch_suite.py

# Installs under PREFIX (default /usr/local): libchorus.so, headers, chorusrun, the CMake package
# (find_package(chorus)), chorus.pc, and the Python package where /usr/bin/python3 finds it.
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# Tracked and new (untracked, not ignored) sources, so a file not yet added is checked too.
FORMAT_FILES = $(shell git ls-files --cached --others --exclude-standard '*.h' '*.cc')

format:
	@clang-format -i $(FORMAT_FILES)

format-check:
	@clang-format --dry-run -Werror $(FORMAT_FILES) && echo "clang-format: all files clean"

clean:
	rm -rf $(BUILD)
