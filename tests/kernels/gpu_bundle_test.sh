#!/usr/bin/env bash
# scripts/gpu-bundle.sh end to end on this machine: the bundle is made, stays under the size limit,
# and its run.sh starts the bundled loom with the bundled libraries (not the system's).
# usage: gpu_bundle_test.sh SOURCE_DIR BUILD_DIR OUTDIR MAX_MIB
set -euo pipefail
source_dir=$1 build=$2 out=$3 max_mib=$4
"$source_dir/scripts/gpu-bundle.sh" "$out" "$build"
bytes=$(du -sb "$out" | cut -f1)
if ((bytes > max_mib * 1024 * 1024)); then
  echo "FAIL: bundle is $bytes bytes, over $max_mib MiB" >&2
  exit 1
fi
version=$("$out/run.sh" loom --version)
[[ $version == "loom "* ]] || { echo "FAIL: run.sh loom --version printed '$version'" >&2; exit 1; }
fmt=$("$out/run.sh" bash -c 'ldd "$0"' "$out/bin/loom" | awk '/libfmt/ { print $3 }')
[[ $fmt == "$out/lib/"* || $fmt == "${TMPDIR:-/tmp}/loom-bundle-libs-"* ]] ||
  { echo "FAIL: the bundled loom loads libfmt from '$fmt', not from the bundle" >&2; exit 1; }
echo "ok: $((bytes / 1024 / 1024)) MiB, '$version', libfmt from $fmt"
