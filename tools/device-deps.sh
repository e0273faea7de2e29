#!/usr/bin/env bash
# device-deps.sh: packs what the GPU machine lacks for building lockstep into .devdeps/ (ignored by
# git) for the device tool's carry, next to the data set in .data/:
#   .devdeps/deps.tar.xz   OpenBLAS (with the gfortran runtime it needs), cJSON and zlib: headers
#                          and shared libraries, as installed here by tools/install-deps.sh
# The GPU machine's image has CUDA, cuBLAS, PyTorch and CMake but no OpenBLAS or cJSON, and nothing
# can be installed there; tests/gpu/device-check.sh unpacks this into its work folder, puts it on
# CMAKE_PREFIX_PATH and LD_LIBRARY_PATH, and uses the system's copy of a library where it has one.
#
#   tools/device-deps.sh            (then: device run with carry [".data", ".devdeps"])
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
LIB=/usr/lib/$ARCH
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/include/cjson" "$STAGE/lib"

need() { [ -e "$1" ] || { echo "device-deps: $1 is missing: run tools/install-deps.sh first" >&2; exit 1; }; }

# headers
for h in cblas.h openblas_config.h; do
    need "/usr/include/$ARCH/openblas-pthread/$h"
    cp "/usr/include/$ARCH/openblas-pthread/$h" "$STAGE/include/"
done
need /usr/include/cjson/cJSON.h
cp /usr/include/cjson/cJSON.h "$STAGE/include/cjson/"
for h in zlib.h zconf.h; do
    src=/usr/include/$h
    [ -e "$src" ] || src=/usr/include/$ARCH/$h
    need "$src"
    cp "$src" "$STAGE/include/"
done

# libraries: the real file under its soname, plus the link name the linker looks for
pack_lib() { # pack_lib LINKNAME PATH
    local real soname
    need "$2"
    real=$(readlink -f "$2")
    soname=$(objdump -p "$real" | awk '$1 == "SONAME" { print $2 }')
    cp "$real" "$STAGE/lib/$soname"
    [ "$1" = "$soname" ] || ln -sf "$soname" "$STAGE/lib/$1"
}
pack_lib libopenblas.so "$LIB/openblas-pthread/libopenblas.so"
pack_lib libgfortran.so.5 "$LIB/libgfortran.so.5"
pack_lib libquadmath.so.0 "$LIB/libquadmath.so.0"
pack_lib libcjson.so "$LIB/libcjson.so"
pack_lib libz.so "$LIB/libz.so"

mkdir -p .devdeps
tar -C "$STAGE" -cJf .devdeps/deps.tar.xz include lib
{
    echo "packed $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME") ($ARCH)"
    tar -tvJf .devdeps/deps.tar.xz
} >.devdeps/MANIFEST
echo "device-deps: .devdeps/deps.tar.xz ($(du -h .devdeps/deps.tar.xz | cut -f1)); carry .devdeps with .data"
