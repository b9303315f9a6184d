#!/usr/bin/env bash
# The first check for a real NVIDIA GPU (prepared; never run yet): records the machine, builds ember from this
# tree with no network (wheels for the build carried in wheels/ when the machine has no registry), runs the
# CUDA tests on the GPU with EMBER_TEST_DEVICE=cuda, the same tests on the emulator beside them, the whole suite
# on the GPU, bench_fused --device cuda beside torch CUDA (when torch with CUDA is installed there), and
# compute-sanitizer's memcheck over the kernel tests. Results go to build/cuda-smoke/. Usage: scripts/cuda_smoke.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=build/cuda-smoke
mkdir -p "$out"
py=${PYTHON:-python3}
{
  echo "== machine"; date -u; uname -a
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || echo "no nvidia-smi"
  nvcc --version 2>/dev/null | tail -2 || echo "no nvcc"
  "$py" --version
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>/dev/null || echo "no torch"
} 2>&1 | tee "$out/machine.txt"
echo "== building ember (wheels/ holds pybind11, scikit-build-core, ... made with pip download for this Python)"
pip_args=()
[ -d wheels ] && pip_args=(--no-index --find-links wheels)
"$py" -m pip install "${pip_args[@]}" -v . > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
"$py" - <<'PY' 2>&1 | tee -a "$out/machine.txt"
import ember as em
print("backend", em.cuda.backend(), "devices", em.cuda.device_count())
print(em.cuda.describe())
try:
    print("nvrtc", em.cuda.nvrtc_library(), em._C._cuda_nvrtc_version(em.cuda.nvrtc_library()))
except em.EmberError as e:
    print("nvrtc:", e)
PY
status=0
echo "== the CUDA tests on the GPU"
EMBER_TEST_DEVICE=cuda "$py" -m pytest tests/test_cuda_kernel.py tests/test_cuda_device.py tests/test_cuda_ptx.py \
  tests/test_cuda_float64.py tests/test_cuda_dlpack.py \
  -q -p no:cacheprovider 2>&1 | tee "$out/gpu-tests.txt" | tail -5 || status=1
echo "== the same under the emulator (and its error-path tests)"
EMBER_CUDA=emulate "$py" -m pytest tests/test_cuda_kernel.py tests/test_cuda_device.py tests/test_cuda_errors.py \
  -q -p no:cacheprovider 2>&1 | tee "$out/emulator-tests.txt" | tail -3 || status=1
echo "== the whole suite on the GPU (stops at the 20th failure)"
EMBER_TEST_DEVICE=cuda timeout 420 "$py" -m pytest tests -q -p no:cacheprovider --maxfail=20 -n 8 2>&1 \
  | tee "$out/gpu-suite.txt" | tail -25 || status=1
echo "== fused ops and matmul beside torch on the same GPU (ms; above 1x: ember faster)"
timeout 240 "$py" bench/bench_fused.py --device cuda 2>&1 | tee "$out/bench-fused.txt" || status=1
if command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer memcheck over the kernel tests"
  EMBER_TEST_DEVICE=cuda compute-sanitizer --tool memcheck --target-processes all "$py" -m pytest \
    tests/test_cuda_kernel.py -q -p no:cacheprovider 2>&1 | tail -20 | tee "$out/memcheck.txt" || status=1
fi
echo "results in $out/ (machine.txt, gpu-tests.txt, emulator-tests.txt, gpu-suite.txt, bench-fused.txt, memcheck.txt)"
exit $status
