# Thin wrapper over Meson + ninja: `make demo` and `make check` work on a fresh Debian 12.
BUILD ?= build
MESON_OPTS ?=

.PHONY: all deps build demo check bench install clean format

all: build

deps:
	@sh scripts/deps.sh build

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_OPTS)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

demo: build
	@sh scripts/demo.sh $(BUILD)

check: build
	@python3 tests/run-suite.py $(BUILD)

bench: build
	@sh scripts/deps.sh bench
	@sh bench/run.sh $(BUILD)

install: build
	meson install -C $(BUILD)

format:
	git ls-files '*.c' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
