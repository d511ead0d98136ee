# Thin wrapper over CMake. `make` builds ./build/upipe; `make run` is the long-context demo
# (tools/run-demo.sh);
# `make test` runs the CI test suite (labels unit, golden, train, mpi; not slow); `make sanitize`
# the ASan+UBSan run of CI (build-asan/); `make fuzz` each libFuzzer harness for FUZZ_SECONDS
# (default 60; clang, build-fuzz/).
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps run test test-all sanitize fuzz bench clean format

all: $(BUILD)/upipe

deps:
	@bash tools/install-deps.sh

$(BUILD)/Makefile: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

$(BUILD)/upipe: deps $(BUILD)/Makefile FORCE
	cmake --build $(BUILD) -j $(JOBS)

FORCE:

run: $(BUILD)/upipe
	bash tools/run-demo.sh $(BUILD)/upipe

test: $(BUILD)/upipe
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE slow

test-all: $(BUILD)/upipe
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

sanitize:
	JOBS=$(JOBS) bash tools/ci-sanitize.sh

FUZZ_SECONDS ?= 60
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) bash tools/fuzz.sh

bench: $(BUILD)/upipe
	bash bench/bench.sh $(BUILD)/upipe

format:
	git ls-files '*.c' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
