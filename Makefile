# Thin wrapper over Meson + ninja: `make demo` and `make check` work on a fresh Debian 12.
BUILD ?= build
ASAN_BUILD ?= build-asan
MESON_OPTS ?=

.PHONY: all deps build build-asan demo check bench install clean format

all: build

deps:
	@sh scripts/deps.sh build

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_OPTS)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

# tracepad and its tests again under ASan+UBSan (the agent and traced targets opt out)
$(ASAN_BUILD)/build.ninja:
	meson setup $(ASAN_BUILD) -Dsanitize=true -Dbench=false $(MESON_OPTS)

build-asan: deps $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD)

demo: build
	@sh scripts/demo.sh $(BUILD)

check: build build-asan
	@python3 tests/run-suite.py $(BUILD) $(ASAN_BUILD)

# the peers' packages first: the LTTng-UST benchmarks are built only when liblttng-ust is
# found, so a build directory configured before it was installed looks again
bench:
	@sh scripts/deps.sh bench
	@if [ -f $(BUILD)/build.ninja ]; then meson setup --reconfigure $(BUILD) >/dev/null; fi
	@$(MAKE) --no-print-directory build
	@sh bench/run.sh $(BUILD)

install: build
	meson install -C $(BUILD)

format:
	git ls-files '*.c' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
