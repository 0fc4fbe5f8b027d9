# The two commands a newcomer needs:
#   make demo   builds chorus and runs the seed example on 4 ranks (one node, no MPI)
#   make test   builds chorus and runs the whole test suite
# Each installs the Debian packages it needs first (scripts/install-deps.sh).

BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
NP ?= 4

.PHONY: all deps configure build demo test format format-check clean

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

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 600

FORMAT_FILES = $(shell git ls-files '*.h' '*.cc')

format:
	@clang-format -i $(FORMAT_FILES)

format-check:
	@clang-format --dry-run -Werror $(FORMAT_FILES) && echo "clang-format: all files clean"

clean:
	rm -rf $(BUILD)
