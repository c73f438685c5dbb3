# vgpu top-level build. `make` builds everything that can be built here;
# `make test` installs what it needs (Debian 12, root) and runs every test;
# `make demo` runs the demo (see README.md).

SHELL      := /bin/bash
GO         ?= go
BIN        := bin
VERSION    ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
GOFLAGS_BUILD := -trimpath -ldflags "-s -w -X main.version=$(VERSION)"
# The guest kernel: the newest installed Debian kernel image's headers.
KVER       ?= $(shell ls /lib/modules 2>/dev/null | sort -V | tail -1)
KDIR       ?= /lib/modules/$(KVER)/build
FUZZTIME   ?= 20s

.PHONY: all vgpu guest-lib guest-driver generate setup test test-go test-c test-fuzz \
	test-guest-lib test-tablespy test-driver test-e2e test-deploy test-reliability fuzz demo clean deb

all: vgpu guest-lib guest-driver

vgpu:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/vgpu ./backend/cmd/vgpu

guest-lib:
	@if [ -f guest-lib/Makefile ]; then $(MAKE) -C guest-lib; else echo "guest-lib: not built yet"; fi

guest-driver:
	@if [ -f guest-driver/Makefile ] && [ -f $(KDIR)/Makefile ]; then \
		$(MAKE) -C guest-driver KDIR=$(KDIR); \
	else echo "guest-driver: skipped (no guest kernel headers at $(KDIR); run scripts/setup.sh)"; fi

generate:
	$(GO) generate ./...

setup:
	scripts/setup.sh

# All tests. Installs what it needs first.
test: setup
	$(MAKE) all
	$(MAKE) test-go test-c test-fuzz test-guest-lib test-driver test-e2e test-deploy
	@echo "make test: all passed"

test-go:
	$(GO) vet ./...
	VGPU_REQUIRE_VM=1 $(GO) test -race -count=1 -timeout 25m ./...

test-c:
	@mkdir -p build
	gcc -std=c11 -Wall -Wextra -Werror -pedantic -o build/protocol-golden protocol/ctest/golden.c
	build/protocol-golden protocol/testdata/golden

test-fuzz:
	scripts/fuzz.sh $(FUZZTIME)

test-guest-lib:
	@if [ -f guest-lib/Makefile ]; then $(MAKE) -C guest-lib test; else echo "guest-lib: no tests yet"; fi
	$(MAKE) test-tablespy

# The export-table spy (scripts/probe/tablespy): its trampolines, and NVIDIA's runtime through
# it on guest-lib's libcuda.so.1 and the sim device (about 20 s).
test-tablespy:
	$(MAKE) -C scripts/probe/tablespy test

# vgpu.ko must build with W=1 and no warnings; its behaviour is tested in the
# TCG guest by backend/pattern (go test, in test-go).
test-driver:
	@if [ -f guest-driver/Makefile ] && [ -f $(KDIR)/Makefile ]; then \
		$(MAKE) -C guest-driver KDIR=$(KDIR) clean >/dev/null; \
		set -o pipefail; mkdir -p build; $(MAKE) -C guest-driver KDIR=$(KDIR) W=1 2>&1 | tee build/driver-w1.log || exit 1; \
		if grep -q "warning:" build/driver-w1.log; then echo "guest-driver: W=1 warnings"; exit 1; fi; \
		echo "guest-driver: W=1 build clean"; \
	else echo "guest-driver: skipped (no kernel headers)"; exit 1; fi

test-e2e:
	@if [ -x scripts/e2e.sh ]; then scripts/e2e.sh; else echo "e2e: not written yet"; fi

# Debian packages (vgpu, vgpu-guest, vgpu-guest-dkms) into build/deb; see deploy/.
deb: vgpu guest-lib
	deploy/build-deb.sh build/deb

# Packages installed and used on this machine and in a TCG guest (DKMS), and a
# libvirt domain with a vGPU (deploy/test/run.sh; root; about 5 minutes).
test-deploy:
	deploy/test/run.sh

# The reliability suite alone (also part of test-go): attacks, faults, quotas, soak.
test-reliability:
	VGPU_REQUIRE_VM=1 $(GO) test -count=1 -timeout 15m -v ./backend/faulttest/...

# Long fuzzing run: every fuzz target for FUZZTIME each (e.g. make fuzz FUZZTIME=30m).
fuzz:
	scripts/fuzz.sh $(FUZZTIME)

demo: setup all
	scripts/demo.sh

clean:
	rm -rf $(BIN) build
	@if [ -f guest-lib/Makefile ]; then $(MAKE) -C guest-lib clean; fi
	@if [ -f guest-driver/Makefile ]; then $(MAKE) -C guest-driver clean KDIR=$(KDIR) || true; fi
