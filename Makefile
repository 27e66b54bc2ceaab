# Thin wrapper over CMake so the README's two commands stay short.
#   make run   — install deps, build ds4 and the default model, run it (non-thinking mode:
#                the chat format ds4-nano was trained on, docs/nano.md)
#   make test  — install deps, build, run the whole test suite (what CI runs)
BUILD ?= build
JOBS ?= $(shell nproc)
PROMPT ?= Tell me a short story about a lighthouse keeper.
TOKENS ?= 200
CMAKE_FLAGS ?=

.PHONY: deps configure build test run clean
deps:
	@scripts/install-deps.sh
configure: deps
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null
build: configure
	@cmake --build $(BUILD) -j $(JOBS)
test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 1500
run: configure
	@cmake --build $(BUILD) -j $(JOBS) --target ds4 ds4_nano_models
	@$(BUILD)/ds4 --nothink -p "$(PROMPT)" -n $(TOKENS)
clean:
	rm -rf $(BUILD)
