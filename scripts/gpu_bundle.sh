#!/usr/bin/env bash
# What travels to a GPU machine where none of weft's Debian libraries are
# installed and nothing can be downloaded (docs/gpu.md, "The GPU bundle"):
# `make gpu-bundle` runs this after the build. It writes BUILD/gpu-bundle/
#
#   weft-gpu.tar.zst  BUILD's programs and backends (weft, libweft-nccl.so,
#                     libweft-cuda.so when built, the test tools and
#                     benchmarks) and gpu-lib/: the closure of their shared
#                     libraries except glibc's own (the loader, libc, libm,
#                     libpthread, libdl, librt, libresolv), which must be the
#                     machine's
#   zstd + its libs   the decompressor, uncompressed (the machine may have
#                     no zstd)
#   unpack.sh         unpacks into a folder: `BUILD/gpu-bundle/unpack.sh DIR`
#                     gives DIR/BUILD/... and DIR/gpu-lib (LD_LIBRARY_PATH)
#
# and refuses a bundle over 64 MiB (the most a GPU session carries).
# Usage: scripts/gpu_bundle.sh [BUILD]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
LIMIT=$((64 * 1024 * 1024))
OUT="$BUILD/gpu-bundle"
[ -x "$BUILD/weft" ] || { echo "gpu-bundle: $BUILD/weft is not built: run make first" >&2; exit 1; }
command -v zstd >/dev/null || { echo "gpu-bundle: zstd is not installed (scripts/setup.sh installs it)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$BUILD" "$stage/gpu-lib"

# The MPI backends and the NCCL emulation link an MPI library that the GPU
# machine lacks (one GPU: one rank), so they stay behind.
files=("$BUILD/weft")
for f in "$BUILD"/libweft-nccl.so "$BUILD"/libweft-cuda.so "$BUILD"/tests/tools/* "$BUILD"/bench/*; do
    [ -f "$f" ] && [ -x "$f" ] && files+=("$f")
done
for f in "${files[@]}"; do
    mkdir -p "$stage/$(dirname "$f")"
    cp -p "$f" "$stage/$f"
done

# glibc's libraries are the machine's: a private copy of them would not
# match its loader.
is_glibc() {
    case "$(basename "$1")" in
    ld-linux*.so* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | linux-vdso*) return 0 ;;
    esac
    return 1
}
# ldd lists the whole closure of each file; a library that is not found is
# an error here, not a surprise there. Libraries the programs dlopen are
# not listed: weft dlopens only its own backends and the CUDA libraries,
# which the GPU machine has.
declare -A seen=()
for f in "${files[@]}"; do
    while read -r name arrow path _; do
        [ "$arrow" = "=>" ] || continue
        if [ "$path" = "not" ]; then
            echo "gpu-bundle: $f needs $name, which is not found" >&2
            exit 1
        fi
        is_glibc "$path" && continue
        [ -n "${seen[$name]:-}" ] && continue
        seen[$name]=1
        cp -L "$path" "$stage/gpu-lib/$name"
    done < <(ldd "$f")
done

mkdir -p "$OUT"
rm -f "$OUT"/*
tar -C "$stage" -cf - "$BUILD" gpu-lib | zstd -q -3 -T0 -o "$OUT/weft-gpu.tar.zst"
zstd_bin=$(command -v zstd)
cp -L "$zstd_bin" "$OUT/zstd"
while read -r name arrow path _; do
    [ "$arrow" = "=>" ] && ! is_glibc "$path" && cp -L "$path" "$OUT/$name"
done < <(ldd "$zstd_bin")
cat > "$OUT/unpack.sh" <<'EOF'
#!/bin/sh
# Unpacks weft-gpu.tar.zst into DIR (default: the current folder); then run
# with LD_LIBRARY_PATH=DIR/gpu-lib (scripts/gpu_check.sh sets it).
set -e
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-.}
mkdir -p "$dest"
LD_LIBRARY_PATH="$here" "$here/zstd" -q -dc "$here/weft-gpu.tar.zst" | tar -C "$dest" -xf -
EOF
chmod +x "$OUT/unpack.sh"

size=$(du -cb "$OUT"/* | tail -1 | cut -f1)
unpacked=$(du -sb "$stage" | cut -f1)
printf 'gpu-bundle: %s: %d files and %d libraries, %.1f MiB unpacked, %.1f MiB to carry (limit 64 MiB)\n' \
    "$OUT" "${#files[@]}" "${#seen[@]}" "$(awk -v b="$unpacked" 'BEGIN { print b / 1048576 }')" \
    "$(awk -v b="$size" 'BEGIN { print b / 1048576 }')"
if [ "$size" -gt "$LIMIT" ]; then
    echo "gpu-bundle: $size bytes is over the 64 MiB a GPU session carries" >&2
    exit 1
fi
