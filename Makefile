# nobubble: a thin front over CMake. `make run` and `make test` each do their own setup on a fresh Debian 12.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
NOBUBBLE := $(BUILD)/nobubble
FORTUNES := $(BUILD)/data/fortunes.txt
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Debian packages the build, the tests and the main job need.
PACKAGES := cmake ninja-build g++ make ccache pkg-config openmpi-bin libopenmpi-dev libcli11-dev libfmt-dev \
            libtomlplusplus-dev doctest-dev nlohmann-json3-dev libssl-dev libopenblas-dev python3-torch \
            python3-numpy python3-matplotlib python3-venv fortunes

.PHONY: setup test-setup hf-venv configure build test test-slurm run bench gpu-deps clean

setup:
	@missing=$$(for p in $(PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "make setup: installing $$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else echo "make setup: all packages present"; fi

configure:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# What the tests need beyond that: a real single-node Slurm for the templates' test (tests/slurm/test_slurm.sh).
TEST_PACKAGES := slurm-wlm munge

# The test suite: unit tests, PyTorch oracles, command-line tests, the Slurm templates on a local Slurm; CUDA tests
# report "skipped" without a GPU.
test: test-setup build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-setup:
	$(MAKE) setup PACKAGES="$(PACKAGES) $(TEST_PACKAGES)"
	$(MAKE) hf-venv

# Python packages Debian lacks (transformers, safetensors, tokenizers: the interop tests' oracle), pinned in
# run/requirements-hf.txt, in a virtual environment under the build folder that sees Debian's packages, so that
# Debian's torch stays the one torch. Remade when the pins change.
HF_VENV := $(BUILD)/venv
hf-venv: $(HF_VENV)/.installed
$(HF_VENV)/.installed: run/requirements-hf.txt
	rm -rf $(HF_VENV)
	/usr/bin/python3 -m venv --system-site-packages $(HF_VENV)
	$(HF_VENV)/bin/pip install --quiet --disable-pip-version-check -r run/requirements-hf.txt
	touch $@

# The Slurm test alone (in `make test` too): run/slurm/train.sbatch and compare.sbatch on a local Slurm: the same
# hash as plain mpirun, preemption and time-limit requeue with exact resume, the comparison's CSV and charts.
test-slurm: test-setup build
	timeout 900 bash tests/slurm/test_slurm.sh $(abspath $(NOBUBBLE)) $(abspath $(BUILD))/slurm_test

$(FORTUNES):
	run/prepare_fortunes.sh $@

# The main job: the same model and seed under 1f1b and under 2bw (Muon, ef) over mpirun -np 2 on the fortunes
# corpus, then the table and the report page (run/compare.sh --grid main; about 90 s on 2 cores).
run: setup build $(FORTUNES)
	NOBUBBLE=$(abspath $(NOBUBBLE)) DATA=$(abspath $(FORTUNES)) run/compare.sh --grid main --out $(abspath $(BUILD))/runs/main

bench: build
	$(NOBUBBLE) bench ops

# Dependencies for a GPU machine without a package registry, unpacked under .deps/prefix (run/gpu_check.sh
# uses them; the device tool carries the folder): CLI11, fmt, toml++, doctest, nlohmann/json headers, OpenSSL's
# libcrypto and OpenBLAS with their runtimes.
GPU_DEBS := libcli11-dev libfmt-dev libfmt9 libtomlplusplus-dev doctest-dev nlohmann-json3-dev libssl-dev libssl3 \
            libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0
gpu-deps:
	rm -rf .deps && mkdir -p .deps/debs .deps/prefix
	cd .deps/debs && apt-get download $(GPU_DEBS)
	for f in .deps/debs/*.deb; do dpkg -x $$f .deps/prefix; done
	rm -rf .deps/debs .deps/prefix/usr/share/doc .deps/prefix/usr/share/man
	find .deps/prefix -name '*.a' -delete  # static archives: not linked, and too big to carry
	@du -sh .deps; echo "gpu-deps: unpacked under .deps/prefix (carry .deps)"

clean:
	rm -rf $(BUILD)
