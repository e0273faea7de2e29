#!/usr/bin/env bash
# test_install.sh BUILD_DIR SOURCE_DIR: installs lockstep from BUILD_DIR into a temporary prefix,
# then configures, builds and runs tests/e2e/consumer against it with find_package(lockstep).
set -eu
build=$1 src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
need() { "$@" || { echo "test_install: missing after install: ${*: -1}" >&2; exit 1; }; }
need test -f "$tmp/prefix/include/lockstep/nn.h"
test -f "$tmp/prefix/lib/cmake/lockstep/lockstepConfig.cmake" || need test -f "$tmp/prefix/lib64/cmake/lockstep/lockstepConfig.cmake"
need test -x "$tmp/prefix/bin/lockstep-run"
# the installed programs run from the prefix without LD_LIBRARY_PATH (their RUNPATH was empty)
for p in fashion_mlp lockstep-ckpt; do
    [ -x "$tmp/prefix/bin/$p" ] || continue
    env -u LD_LIBRARY_PATH "$tmp/prefix/bin/$p" --help >/dev/null ||
        { echo "test_install: the installed $p does not run (its libraries?)" >&2; exit 1; }
done
# no RUNPATH with an empty entry (the loader's current directory) in the build tree or the install
if command -v readelf >/dev/null; then
    for f in "$build"/liblockstep.so "$build"/examples/*/fashion_* "$build"/cli/lockstep-ckpt "$tmp/prefix"/lib*/liblockstep.so \
        "$tmp/prefix"/bin/*; do
        [ -f "$f" ] || continue
        rp=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*R\(UN\)\{0,1\}PATH.*\[\(.*\)\]/\2/p')
        case ":$rp:" in
        *::*) [ -n "$rp" ] && { echo "test_install: $f: RUNPATH '$rp' has an empty entry (the current directory)" >&2; exit 1; } ;;
        esac
    done
fi
# no installed RUNPATH entry outside the prefix: $ORIGIN/../.., the build tree's, named the prefix's
# parent (a libc.so.6 there was loaded); the library has a versioned SONAME
if command -v readelf >/dev/null; then
    for f in "$tmp/prefix"/bin/* "$tmp/prefix"/lib*/liblockstep.so; do
        [ -f "$f" ] || continue
        rp=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*R\(UN\)\{0,1\}PATH.*\[\(.*\)\]/\2/p')
        case ":$rp:" in
        *':$ORIGIN/../..'*) echo "test_install: $f: RUNPATH '$rp' reaches outside the prefix" >&2; exit 1 ;;
        esac
    done
    so=$(readelf -d "$tmp"/prefix/lib*/liblockstep.so | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
    case "$so" in
    liblockstep.so.[0-9]*) ;;
    *) echo "test_install: liblockstep.so's SONAME is '$so', not versioned" >&2; exit 1 ;;
    esac
fi
# every installed header compiles alone, as C11 and (where a C++ compiler is) as C++17 and C++20
# (a narrowing in ddp.h's inline functions was an error in C++; nn.h's parameter named 'requires',
# a keyword since C++20, stopped any C++20 program that included it), and all of them together
cxx20=
if command -v c++ >/dev/null && echo | c++ -std=c++20 -fsyntax-only -x c++ - 2>/dev/null; then cxx20=c++20; fi
all=""
for h in "$tmp/prefix"/include/lockstep/*.h; do
    inc="#include <lockstep/$(basename "$h")>"
    all="$all$inc
"
    echo "$inc" | cc -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$tmp/prefix/include" -x c - ||
        { echo "test_install: $h does not compile alone as C11" >&2; exit 1; }
    if command -v c++ >/dev/null; then
        for std in c++17 $cxx20; do
            echo "$inc" | c++ -std=$std -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$tmp/prefix/include" -x c++ - ||
                { echo "test_install: $h does not compile alone as ${std^^}" >&2; exit 1; }
        done
    fi
done
echo "$all" | cc -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$tmp/prefix/include" -x c - ||
    { echo "test_install: the installed headers do not compile together as C11" >&2; exit 1; }
if command -v c++ >/dev/null; then
    echo "$all" | c++ -std=c++17 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$tmp/prefix/include" -x c++ - ||
        { echo "test_install: the installed headers do not compile together as C++17" >&2; exit 1; }
fi
cmake -S "$src/tests/e2e/consumer" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" >/dev/null
rc=0
out=$(LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/build/consumer") || rc=$?
echo "$out"
[ "$rc" = 0 ] || { echo "test_install: the consumer exited with status $rc" >&2; exit 1; }
[ "$out" = "consumer: 6 outputs, 15 parameters" ] || { echo "test_install: unexpected consumer output" >&2; exit 1; }
# a C++-only project finds the package too (it asked for MPI's C component: "language C is not
# enabled"); 4-3-2 with biases: 23 parameters
if command -v c++ >/dev/null; then
    cmake -S "$src/tests/e2e/consumer_cxx" -B "$tmp/cxx" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/cxx.log" 2>&1 ||
        { cat "$tmp/cxx.log"; echo "test_install: a C++-only project cannot find_package(lockstep)" >&2; exit 1; }
    cmake --build "$tmp/cxx" >/dev/null
    out=$(LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/cxx/consumer_cxx")
    [ "$out" = "consumer_cxx: 23 parameters" ] || { echo "test_install: consumer_cxx printed '$out'" >&2; exit 1; }
fi

# The prefix moved (README: the installed programs run wherever it is moved): the programs and a C
# project built with find_package against the new place run without LD_LIBRARY_PATH; no installed
# text file (the package config) and no RUNPATH names the build tree, the sources or the old prefix
mv "$tmp/prefix" "$tmp/moved"
for d in "$build" "$src" "$tmp/prefix"; do
    d=$(cd "$(dirname "$d")" 2>/dev/null && pwd -P)/$(basename "$d")
    hit=$(grep -rlIF -e "$d/" "$tmp/moved" || true)
    [ -z "$hit" ] || { echo "test_install: installed files name $d: $hit" >&2; exit 1; }
    if command -v readelf >/dev/null; then
        for f in "$tmp/moved"/bin/* "$tmp/moved"/lib*/liblockstep.so; do
            readelf -d "$f" 2>/dev/null | grep -E "R(UN)?PATH" | grep -qF "$d" &&
                { echo "test_install: $f: a RUNPATH names $d" >&2; exit 1; }
        done
    fi
done
for p in fashion_mlp lockstep-ckpt; do
    [ -x "$tmp/moved/bin/$p" ] || continue
    env -u LD_LIBRARY_PATH "$tmp/moved/bin/$p" --help >/dev/null ||
        { echo "test_install: $p does not run from the moved prefix" >&2; exit 1; }
done
cmake -S "$src/tests/e2e/consumer" -B "$tmp/moved_build" -DCMAKE_PREFIX_PATH="$tmp/moved" >"$tmp/moved.log" 2>&1 &&
    cmake --build "$tmp/moved_build" >>"$tmp/moved.log" 2>&1 ||
    { cat "$tmp/moved.log"; echo "test_install: the consumer does not build against the moved prefix" >&2; exit 1; }
out=$(env -u LD_LIBRARY_PATH "$tmp/moved_build/consumer") ||
    { echo "test_install: the consumer built against the moved prefix does not run" >&2; exit 1; }
[ "$out" = "consumer: 6 outputs, 15 parameters" ] || { echo "test_install: moved: consumer printed '$out'" >&2; exit 1; }
mv "$tmp/moved" "$tmp/prefix"

# examples/quickstart (docs/guide.md) built on its own against the install, as a user's project.
# On the CPU (the device check runs it on a GPU): ranks sharing one GPU could not use NCCL.
cmake -S "$src/examples/quickstart" -B "$tmp/qs" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/qs" >/dev/null
# and without CMake, with the README's command (without -lm: log@@GLIBC undefined)
P=$tmp/prefix
cc "$src/examples/quickstart/quickstart.c" -I"$P/include" -L"$P/lib" -llockstep -lm -Wl,-rpath,"$P/lib" \
    -o "$tmp/qs_cc" || { echo "test_install: the README's cc command does not build the quickstart" >&2; exit 1; }
grep -qF '`cc prog.c -IP/include -LP/lib -llockstep -lm -Wl,-rpath,P/lib`' "$src/README.md" ||
    { echo "test_install: the README's cc command is not the one tested here" >&2; exit 1; }
(unset LD_LIBRARY_PATH; "$tmp/qs_cc" --help >/dev/null) ||
    { echo "test_install: the quickstart built with cc does not run" >&2; exit 1; }
export LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 LOCKSTEP_DEVICE=cpu
qs() { # DIR ARGS...: runs the quickstart in DIR (its exit status checked), its lines without the
    # library's log lines into DIR/out
    local d=$1 rc=0
    shift
    mkdir -p "$tmp/$d"
    (cd "$tmp/$d" && "$@" >raw 2>&1) || rc=$?
    grep -v '^\[lockstep' "$tmp/$d/raw" >"$tmp/$d/out" || true
    [ "$rc" = 0 ] || { cat "$tmp/$d/raw"; echo "test_install: '$*' exited with status $rc" >&2; exit 1; }
}
qs one "$tmp/qs/quickstart" --epochs 4 --checkpoint-dir ck
cat "$tmp/one/out"
acc=$(awk '/^epoch 4 / {sub("%", "", $NF); print $NF}' "$tmp/one/out")
awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 93) }' ||
    { echo "test_install: quickstart's test accuracy after 4 epochs is '$acc', expected at least 93%" >&2; exit 1; }
[ -f "$tmp/one/ck/step-00000512/model.safetensors" ] ||
    { echo "test_install: no checkpoint after epoch 4" >&2; exit 1; }
# Run again with more epochs: it resumes after epoch 4 and matches a run that never stopped (bitwise).
qs one "$tmp/qs/quickstart" --epochs 6 --checkpoint-dir ck
qs six "$tmp/qs/quickstart" --epochs 6 --checkpoint-dir ck
grep -qF "quickstart: resumed from ck/step-00000512 (epoch 4 done)" "$tmp/one/out" ||
    { cat "$tmp/one/out"; echo "test_install: the second run did not resume from epoch 4" >&2; exit 1; }
diff <(grep '^epoch' "$tmp/one/out") <(grep '^epoch [56] ' "$tmp/six/out") ||
    { echo "test_install: the resumed epochs 5-6 differ from a run that never stopped" >&2; exit 1; }
two="skipped (no mpirun)"
if "$tmp/prefix/bin/lockstep-run" -n 2 --dry-run true >/dev/null 2>&1; then
    # 2 ranks of batch 32 take the steps of 1 rank of batch 64: the same losses within 1e-5 (the
    # sums' order differs)
    qs two "$tmp/prefix/bin/lockstep-run" -n 2 "$tmp/qs/quickstart" --epochs 4 --batch-size 32 --checkpoint-dir ck
    grep -q '^quickstart: 2 ranks on cpu' "$tmp/two/out" ||
        { cat "$tmp/two/out"; echo "test_install: not 2 ranks" >&2; exit 1; }
    [ -f "$tmp/two/ck/step-00000512/model.safetensors" ] || { echo "test_install: 2 ranks: no checkpoint" >&2; exit 1; }
    paste <(grep "^epoch [1-4] " "$tmp/six/out") <(grep "^epoch" "$tmp/two/out") | awk -F'\t' '
        { split($1, a, " "); split($2, b, " "); n++
          for (i = 1; i <= length(a); i++) if (a[i] ~ /^[0-9.]+%?$/ && a[i] + 0 != b[i] + 0) {
              d = a[i] - b[i]; if (d < 0) d = -d; if (d > 1e-5 * (a[i] ~ /%/ ? 100 : 1)) bad = bad "\n  " $0 } }
        END { if (n != 4 || bad != "") { print "test_install: 2 ranks differ from 1 rank:" bad; exit 1 } }' ||
        exit 1
    two="2 ranks = 1 rank"
fi
echo "test_install: quickstart built against the install: ${acc}% after 4 epochs; resumed = straight; $two"
