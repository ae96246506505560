#!/usr/bin/env bash
# scripts/gpu-bundle.sh end to end on this machine: the bundle is made, stays under the size limit,
# and its run.sh starts the bundled loom with the bundled libraries (not the system's); with MPI, the
# bundled mpirun trains over 2 ranks with messages staged through host memory while the system's Open
# MPI (its plugins, help files, settings and launcher) is hidden, as on a GPU machine, which has none.
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
[[ $fmt == "$out/lib/"* || $fmt == "${TMPDIR:-/tmp}/loom-bundle-"* ]] ||
  { echo "FAIL: the bundled loom loads libfmt from '$fmt', not from the bundle" >&2; exit 1; }
mpi_note="no MPI in this build"
if [[ -f $out/openmpi.tar.gz ]]; then
  text=$(mktemp -d)
  head -c 100000 "$source_dir/README.md" >"$text/text.txt"
  "$out/run.sh" loom data prepare --input "$text/text.txt" --out "$text/tokens.bin" >/dev/null
  train="cd $text && env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM $out/run.sh mpirun \
    --oversubscribe -np 2 loom run --model gpt-tiny --cluster local-cpu --dp 2 --zero 1 --data tokens.bin \
    --steps 2 --global-batch 4 --seq 32 --threads 1 --comm host-staged"
  hide=""
  for dir in $(ompi_info --path pkglibdir | awk -F': ' '{ print $2 }') /usr/share/openmpi /etc/openmpi; do
    [[ -d $dir ]] && hide+="mount -t tmpfs none $dir && "
  done
  if unshare -m true 2>/dev/null; then
    log=$(unshare -m bash -c "$hide $train" 2>&1) || { echo "FAIL: bundled mpirun run failed: $log" >&2; exit 1; }
    mpi_note="2 ranks through the bundled Open MPI with the system's hidden"
  else
    log=$(bash -c "$train" 2>&1) || { echo "FAIL: bundled mpirun run failed: $log" >&2; exit 1; }
    mpi_note="2 ranks through the bundled Open MPI (unshare -m is not allowed here: the system's was not hidden)"
  fi
  grep -q "step     2/2" <<<"$log" || { echo "FAIL: no second step in: $log" >&2; exit 1; }
  grep -q "messages staged through host memory" <<<"$log" || { echo "FAIL: not staged: $log" >&2; exit 1; }
  rm -rf "$text"
fi
echo "ok: $((bytes / 1024 / 1024)) MiB, '$version', libfmt from $fmt; $mpi_note"
