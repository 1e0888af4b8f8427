#!/usr/bin/env bash
# Rebuilds the HIP fixtures in tests/data/hip/ with real compilers, no GPU
# needed (integration/setup.sh installs them):
#   hipcc (Debian 12, ROCm 5.2 on LLVM 15)   plain offload bundles, code object v4
#   clang++-19 + lld-19                      --offload-compress (CCOB v2, zstd),
#                                            code object v6 and generic targets, gfx942
# Each fixture is small (< 64 KB) and the tests (tests/image/amd_scan.rs)
# compare what gpu-guard lists in them with clang-offload-bundler --list.
#
# Usage: integration/make-hip-fixtures.sh
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
out="$here/tests/data/hip"
mkdir -p "$out"
for t in hipcc clang++-19; do
    command -v "$t" >/dev/null || { echo "$t not found: run integration/setup.sh" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# With the HIP headers (hipcc).
cat > axpy.hip <<'EOF'
#include <hip/hip_runtime.h>
__global__ void axpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" void launch_axpy(float a, const float *x, float *y, int n) {
    hipLaunchKernelGGL(axpy, dim3((n + 255) / 256), dim3(256), 0, 0, a, x, y, n);
}
EOF
cat > scale.hip <<'EOF'
#include <hip/hip_runtime.h>
__global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" void launch_scale(float *x, float a, int n) {
    hipLaunchKernelGGL(scale, dim3((n + 255) / 256), dim3(256), 0, 0, x, a, n);
}
EOF
# Without them (clang++-19 -nogpuinc): the declarations clang's HIP front
# end needs for the host-side launch stub.
head='#define __global__ __attribute__((global))
typedef __SIZE_TYPE__ size_t;
struct dim3 { unsigned x, y, z; };
typedef struct ihipStream_t *hipStream_t;
extern "C" int hipLaunchKernel(const void *, dim3, dim3, void **, size_t, hipStream_t);'
printf '%s\nextern "C" __global__ void k1(float *x, float a) { x[0] *= a; }\n' "$head" > k1.hip
printf '%s\nextern "C" __global__ void k2(float *x, float a) { x[1] += a; }\n' "$head" > k2.hip

# Three targets, features spelled out and left out, one translation unit.
hipcc --offload-arch=gfx906:sramecc+:xnack- --offload-arch=gfx90a:xnack+ --offload-arch=gfx1030 \
    -shared -fPIC -o "$out/hipcc-multi.so" axpy.hip
# Two translation units: two bundles in .hip_fatbin, two wrappers.
hipcc --offload-arch=gfx908:xnack- --offload-arch=gfx90a \
    -shared -fPIC -o "$out/hipcc-two-tu.so" axpy.hip scale.hip

c19() { clang++-19 -x hip -nogpulib -nogpuinc -fPIC -shared -fuse-ld=lld "$@"; }
# Compressed (LLVM 19 writes CCOB v2, zstd), two units: two compressed
# bundles; gfx942, and gfx11-generic (code object v6).
c19 --offload-arch=gfx942:sramecc+:xnack- --offload-arch=gfx11-generic \
    -Xarch_device -mcode-object-version=6 --offload-compress \
    -o "$out/clang19-compressed.so" k1.hip k2.hip
# Plain, code object v6 with generic targets (e_flags carry the generic version).
c19 --offload-arch=gfx10-3-generic --offload-arch=gfx11-generic --offload-arch=gfx942 \
    -Xarch_device -mcode-object-version=6 -o "$out/clang19-generic.so" k1.hip
# The compressed section alone, as a bare bundle file (what the runtime
# also loads from a file with hipModuleLoad).
objcopy -O binary --only-section=.hip_fatbin "$out/clang19-compressed.so" "$out/clang19-compressed.hipfb"
ls -l "$out"
