#!/usr/bin/env bash
# The GPU check: build with CUDA, run every test (CUDA ones included), then the GPU benchmark, in under
# 8 minutes, on a machine with an NVIDIA GPU and no package registry. Results go to RESULTS_DIR.
#
#   make gpu-deps            # beforehand, on a machine with Debian's registry: unpacks .deps/prefix
#   run/gpu_check.sh RESULTS_DIR
#
# Built without MPI where MPI is absent. Each phase has its own time limit; the summary names each phase's
# exit status, so a failure in one phase still leaves the others' results. GPU_CHECK_SKIP="cpu bench" skips
# phases (for a quick build-and-CUDA-tests probe).
set -uo pipefail
out=${1:?usage: run/gpu_check.sh RESULTS_DIR}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
deps=$root/.deps/prefix/usr
build=${GPU_CHECK_BUILD:-build-gpu}
t0=$(date +%s)
summary="$out/summary.txt"
: >"$summary"
note() { echo "[gpu_check +$(($(date +%s) - t0))s] $*" | tee -a "$summary"; }

if [ ! -d "$deps" ]; then
  note "missing $deps: run 'make gpu-deps' on a machine with Debian's registry and carry .deps"
  exit 1
fi
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu/openblas-pthread:$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8}
python=$(command -v python3 || echo /usr/bin/python3)
{
  nvidia-smi 2>&1 | head -20
  echo "nvcc: $(nvcc --version 2>&1 | tail -1)"
  echo "cmake: $(cmake --version | head -1)"
  echo "mpirun: $(command -v mpirun || echo absent)"
  echo "python3: $python"
} >"$out/machine.txt" 2>&1
note "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"

# 1. Configure and build (about 2 minutes on 16 cores).
timeout 300 cmake -S . -B "$build" -G Ninja -DNOBUBBLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DNOBUBBLE_DEPS_PREFIX="$deps" -DOPENSSL_ROOT_DIR="$deps" \
  -DOPENBLAS_INCLUDE_DIR="$deps/include/x86_64-linux-gnu/openblas-pthread" \
  -DOPENBLAS_LIBRARY="$deps/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so" \
  -DNOBUBBLE_TORCH_PYTHON="$python" >"$out/build.log" 2>&1 &&
  timeout 300 cmake --build "$build" -j "$(nproc)" >>"$out/build.log" 2>&1
rc=$?
note "build: exit $rc"
if [ $rc != 0 ]; then
  tail -40 "$out/build.log"
  exit 1
fi

# 2. The CUDA tests (each exits 77 = skipped only where no GPU is usable: here that would be a failure).
(cd "$build" && timeout 240 ctest -R '^cuda\.' --output-on-failure --timeout 120) >"$out/ctest_cuda.log" 2>&1
note "cuda tests: exit $? ($(grep -E 'tests passed|tests failed' "$out/ctest_cuda.log" | tail -1))"
# Only the NCCL transport test may skip here: it needs 2 GPUs (one NCCL communicator cannot hold two ranks on
# one GPU), and the lent machine has one.
skipped=$(grep -E '\*\*\*Skipped|Not Run' "$out/ctest_cuda.log" | grep -v 'cuda.test_nccl_transport' || true)
[ -n "$skipped" ] && note "WARNING: a CUDA test was skipped on a GPU machine: $skipped"
grep -q 'cuda.test_nccl_transport.*Skipped' "$out/ctest_cuda.log" && note "NCCL transport test skipped (needs 2 GPUs)"

skip() { [[ " ${GPU_CHECK_SKIP:-} " == *" $1 "* ]]; }

# 3. Everything else (CPU reference tests) on this machine's cores.
if ! skip cpu; then
  (cd "$build" && timeout 150 ctest -E '^cuda\.' -j 8 --output-on-failure --timeout 120) >"$out/ctest_cpu.log" 2>&1
  note "cpu tests: exit $? ($(grep -E 'tests passed|tests failed' "$out/ctest_cpu.log" | tail -1))"
fi

# 4. The benchmark.
if ! skip bench; then
  timeout 200 "$build/nobubble" bench gpu --profile ${GPU_BENCH_ARGS:-} >"$out/bench_gpu.txt" 2>&1
  note "bench gpu: exit $?"
  tee -a "$summary" <"$out/bench_gpu.txt"
fi
# 5. A short real training run on the GPU: `tiny` on text made of this repository's own sources and docs.
if ! skip train; then
  find . -path ./build-gpu -prune -o -path ./.deps -prune -o -path ./.git -prune -o -type f \
    \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.md' \) -print0 | sort -z | xargs -0 cat >"$build/corpus.txt"
  timeout 120 "$build/nobubble" train --device cuda --model tiny --data "$build/corpus.txt" --lr 3e-3 \
    --min-lr 3e-4 --lr-warmup-iters 20 --train-iters 300 --micro-batch-size 16 --seq-length 256 --eval-interval 100 \
    --eval-iters 8 --log-interval 50 >"$out/train_cuda.txt" 2>&1
  note "train --device cuda: exit $?"
  tail -n 9 "$out/train_cuda.txt" | tee -a "$summary"
  # The delayed-gradient path on the GPU: Muon with Error Feedback on 2 in-process 2BW stages, then SOAP.
  for run in "muon --schedule 2bw --stages 2 --num-microbatches 2 --delay-fix ef --lr 2e-2" "soap --lr 3e-3"; do
    name=train_cuda_${run%% *}.txt
    timeout 120 "$build/nobubble" train --device cuda --model tiny --data "$build/corpus.txt" --optimizer $run \
      --lr-warmup-iters 10 --train-iters 100 --micro-batch-size 16 --seq-length 256 --eval-interval 50 \
      --eval-iters 4 --log-interval 25 >"$out/$name" 2>&1
    note "train --device cuda --optimizer $run: exit $?"
    tail -n 4 "$out/$name" | tee -a "$summary"
  done
  # MoE blocks on the GPU (cuda/moe_*.cu; issue 12): tiny-moe with Muon, each expert's matrices its own.
  timeout 120 "$build/nobubble" train --device cuda --model tiny-moe --data "$build/corpus.txt" --optimizer muon \
    --lr 2e-2 --lr-warmup-iters 10 --train-iters 100 --micro-batch-size 16 --seq-length 256 --eval-interval 50 \
    --eval-iters 4 --log-interval 25 >"$out/train_cuda_moe.txt" 2>&1
  note "train --device cuda --model tiny-moe: exit $?"
  tail -n 4 "$out/train_cuda_moe.txt" | tee -a "$summary"
fi
note "done"
