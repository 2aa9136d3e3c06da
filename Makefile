# nobubble: a thin front over CMake. `make run` and `make test` each do their own setup on a fresh Debian 12.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
NOBUBBLE := $(BUILD)/nobubble
FORTUNES := $(BUILD)/data/fortunes.txt
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Debian packages the build, the tests and the main job need.
PACKAGES := cmake ninja-build g++ make ccache pkg-config openmpi-bin libopenmpi-dev libcli11-dev libfmt-dev \
            doctest-dev libopenblas-dev python3-torch python3-numpy python3-matplotlib fortunes

.PHONY: setup configure build test test-slurm run bench gpu-deps clean

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

# The test suite: unit tests, PyTorch oracles, command-line tests; CUDA tests report "skipped" without a GPU.
test: setup build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# A real single-node Slurm on this machine (run/slurm/local_slurm.sh) running run/slurm/train.sbatch: same hash as
# plain mpirun, preemption and time-limit requeue with exact resume (~1 min; not yet in `make test`, see the script).
test-slurm: build
	$(MAKE) setup PACKAGES="slurm-wlm munge"
	timeout 300 bash tests/slurm/test_slurm.sh $(abspath $(NOBUBBLE)) $(abspath $(BUILD))/slurm_test

$(FORTUNES):
	run/prepare_fortunes.sh $@

# The main job: train `tiny` on the fortunes corpus for a few minutes on 2 cores.
run: setup build $(FORTUNES)
	run/train_fortunes.sh $(NOBUBBLE) $(FORTUNES) $(BUILD)/runs/fortunes

bench: build
	$(NOBUBBLE) bench ops

# Dependencies for a GPU machine without a package registry, unpacked under .deps/prefix (run/gpu_check.sh
# uses them; the device tool carries the folder): CLI11, fmt, doctest headers and OpenBLAS with its runtime.
GPU_DEBS := libcli11-dev libfmt-dev libfmt9 doctest-dev libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread \
            libgfortran5 libquadmath0
gpu-deps:
	rm -rf .deps && mkdir -p .deps/debs .deps/prefix
	cd .deps/debs && apt-get download $(GPU_DEBS)
	for f in .deps/debs/*.deb; do dpkg -x $$f .deps/prefix; done
	rm -rf .deps/debs .deps/prefix/usr/share/doc .deps/prefix/usr/share/man
	find .deps/prefix -name '*.a' -delete  # static archives: not linked, and too big to carry
	@du -sh .deps; echo "gpu-deps: unpacked under .deps/prefix (carry .deps)"

clean:
	rm -rf $(BUILD)
