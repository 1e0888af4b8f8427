#!/usr/bin/env bash
# Rebuilds the fat-binary fixtures in tests/data/fatbin/ with NVIDIA's own
# tools, from the PyPI wheels:
#   pip install nvidia-cuda-nvcc nvidia-cuda-cuobjdump      (nvcc, ptxas, fatbinary 13.x)
#   pip install --target DIR nvidia-cuda-nvcc-cu12          (ptxas 12.9: sm_52, which 13.0 dropped)
# and gcc/objcopy (Debian: build-essential binutils).
#
# Usage: integration/make-fatbin-fixtures.sh [CU12_PTXAS]
#   NVCC_BIN  directory of nvcc/fatbinary (default: found in the Python site-packages)
#   CU12_PTXAS ptxas of CUDA 12.x for the sm_52 fixture (default: $CU12_PTXAS, else skipped
#              with a message; the committed old-arch.* fixtures stay as they are)
#
# Each fixture is small (< 40 KB; -cudart none keeps cudart out) and the
# tests compare what gpu-guard lists in them with cuobjdump.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
out="$here/tests/data/fatbin"
mkdir -p "$out"

if [[ -z "${NVCC_BIN:-}" ]]; then
    site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    NVCC_BIN=$(ls -d "$site"/nvidia/cu1*/bin 2>/dev/null | sort | tail -1)
fi
[[ -x "$NVCC_BIN/nvcc" ]] || { echo "nvcc not found (set NVCC_BIN; pip install nvidia-cuda-nvcc)" >&2; exit 1; }
export PATH="$NVCC_BIN:$PATH"
CU12_PTXAS=${1:-${CU12_PTXAS:-}}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

cat > add.cu <<'EOF'
__global__ void add(float *a, const float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += b[i];
}
extern "C" void launch_add(float *a, const float *b, int n) { add<<<(n + 255) / 256, 256>>>(a, b, n); }
EOF
cat > mul.cu <<'EOF'
__global__ void mul(float *a, const float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= b[i];
}
extern "C" void launch_mul(float *a, const float *b, int n) { mul<<<(n + 255) / 256, 256>>>(a, b, n); }
EOF
cat > host.c <<'EOF'
int host_only(int x) { return x + 1; }
EOF

so() { # so NAME SOURCES... -- NVCC_FLAGS...
    local name=$1; shift
    local srcs=()
    while [[ $1 != -- ]]; do srcs+=("$1"); shift; done
    shift
    nvcc -shared -Xcompiler -fPIC -cudart none -o "$out/$name" "${srcs[@]}" "$@"
}

# Several architectures, two translation units: two containers in one .so.
so multi-arch.so add.cu mul.cu -- \
    -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90
# PTX only / SASS only.
so ptx-only.so add.cu -- -gencode arch=compute_80,code=compute_80
so sass-only.so add.cu -- -gencode arch=compute_86,code=sm_86
# Architecture-specific sm_90a, SASS and PTX.
so sm90a.so add.cu -- -gencode arch=compute_90a,code=[sm_90a,compute_90a]
# Family-specific sm_100f, sm_103f, sm_120f with PTX compute_100f.
so sm100f.so add.cu -- -gencode arch=compute_100f,code=[sm_100f,compute_100f] \
    -gencode arch=compute_103f,code=sm_103f -gencode arch=compute_120f,code=sm_120f
# Everything compressed, both algorithms (size = Zstandard, speed = LZ4).
so compressed-zstd.so add.cu mul.cu -- -Xfatbin=-compress-all --compress-mode=size \
    -gencode arch=compute_80,code=[sm_80,compute_80]
so compressed-lz4.so add.cu -- -Xfatbin=-compress-all --compress-mode=speed \
    -gencode arch=compute_89,code=[sm_89,compute_89]
# Nothing compressed.
so uncompressed.so add.cu -- --compress-mode=none -gencode arch=compute_75,code=[sm_75,compute_75]
# fatbinary --concat: cubins grouped and compressed together (kind 0x100).
so concat.so add.cu mul.cu -- -Xfatbin=--concat \
    -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a \
    -gencode arch=compute_100f,code=sm_100f -gencode arch=compute_120a,code=sm_120a
# Relocatable device code: __nv_relfatbin in an object and in a library.
nvcc -rdc=true -c -Xcompiler -fPIC -o "$out/rdc.o" add.cu -gencode arch=compute_80,code=[sm_80,compute_80]
so rdc.so add.cu mul.cu -- -rdc=true -gencode arch=compute_86,code=[sm_86,compute_86]
# The fatbin section renamed: found only through the .nvFatBinSegment wrapper.
objcopy --rename-section .nv_fatbin=.rodata.renamed "$out/sass-only.so" "$out/renamed-section.so"
# A host-only library: no device code.
gcc -shared -fPIC -o "$out/no-device-code.so" host.c

# Hand-assembled fatbins: an identifier, a bare .fatbin file, and an old
# architecture (sm_52, dropped by CUDA 13.0) whose PTX ISA 8.8 needs CUDA 12.9.
nvcc -cubin -arch=sm_80 -o add_80.cubin add.cu
nvcc -ptx -arch=compute_75 -o add_75.ptx add.cu
fatbinary --create=ident.fatbin -64 --ident=kernels/add.cu \
    --image3=kind=elf,sm=80,file=add_80.cubin --image3=kind=ptx,sm=75,file=add_75.ptx
gcc -shared -fPIC -o host.so host.c
objcopy --add-section .nv_fatbin=ident.fatbin --set-section-flags .nv_fatbin=alloc,readonly host.so "$out/ident.so"
fatbinary --create="$out/bare.fatbin" -64 --image3=kind=elf,sm=80,file=add_80.cubin \
    --image3=kind=ptx,sm=75,file=add_75.ptx

if [[ -n "$CU12_PTXAS" && -x "$CU12_PTXAS" ]]; then
    sed -e 's/^\.version .*/.version 8.8/' -e 's/^\.target .*/.target sm_52/' add_75.ptx > add_52.ptx
    "$CU12_PTXAS" -arch=sm_52 -o add_52.cubin add_52.ptx
    fatbinary --create=old.fatbin -64 --image3=kind=elf,sm=52,file=add_52.cubin \
        --image3=kind=ptx,sm=52,file=add_52.ptx
    objcopy --add-section .nv_fatbin=old.fatbin --set-section-flags .nv_fatbin=alloc,readonly host.so "$out/old-arch.so"
else
    echo "CU12_PTXAS not given: old-arch.so left as committed" >&2
fi

ls -l "$out"
