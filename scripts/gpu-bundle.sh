#!/usr/bin/env bash
# Gathers what a lent GPU machine needs to run Loom into one folder small enough to carry there:
# the built `loom`, the test binaries (not the Qt GUI's) and the shared libraries they load that such a
# machine lacks, plus `run.sh`, which points the loader at the bundle's libraries and at the machine's
# own CUDA (/usr/local/cuda, the NVIDIA wheels of its PyTorch venv) and runs a command:
#   scripts/gpu-bundle.sh OUTDIR [BUILD_DIR]      then, on the GPU machine: OUTDIR/run.sh loom --version
# CUDA's own libraries (cudart, cuBLAS, cuDNN, NCCL, the driver) and the C library stay behind: the GPU
# machine's must be used. Libraries over 4 MiB and test programs over 1 MiB (each carries the kernels'
# device code) travel gzip-compressed and are unpacked on first use.
set -euo pipefail

usage() { echo "usage: $0 OUTDIR [BUILD_DIR]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
out=$1
build=${2:-$(dirname "$0")/../build}
[[ -x $build/cli/loom ]] || { echo "gpu-bundle: no $build/cli/loom: build first" >&2; exit 2; }

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
binaries=("$build/cli/loom")
while IFS= read -r test; do binaries+=("$test"); done < <(find "$build/tests" -maxdepth 2 -type f -executable \
  -name '*_test' ! -path '*/gui/*' | sort)

# Left out: the GPU machine brings its own CUDA stack; glibc and the loader must be the system's.
skip='^(libcuda|libcudart|libcublas|libcudnn|libnccl|libnvidia|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|ld-linux|linux-vdso)'
for binary in "${binaries[@]}"; do
  name=$(basename "$binary")
  cp "$binary" "$out/bin/"
  strip --strip-unneeded "$out/bin/$name"
  if [[ $name != loom ]] && (($(stat -c %s "$out/bin/$name") > 1024 * 1024)); then
    gzip -9 "$out/bin/$name"
  fi
  ldd "$binary" | awk '/=> \// { print $1, $3 }' | while read -r name path; do
    [[ $name =~ $skip || -e $out/lib/$name || -e $out/lib/$name.gz ]] && continue
    if (($(stat -L -c %s "$path") > 4 * 1024 * 1024)); then
      gzip -9 -c "$path" >"$out/lib/$name.gz"
    else
      cp -L "$path" "$out/lib/$name"
    fi
  done
done
if ldd "$build/cli/loom" | grep -q libmpi; then
  echo "gpu-bundle: note: this build links Open MPI, whose plugins are not bundled; for runs on a GPU machine" \
    "configure with -DLOOM_MPI=OFF (README: On a GPU machine)" >&2
fi

cat >"$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs a command with the bundle's libraries and this machine's CUDA libraries on the loader path;
# a first word naming a bundled program (loom, loom_kernels_gpu_test, ...) runs the bundled one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
libs=$here/lib
if compgen -G "$here/lib/*.gz" >/dev/null; then
  libs=${TMPDIR:-/tmp}/loom-bundle-libs-$(id -u)-$(cat "$here/lib"/*.gz | cksum | cut -d' ' -f1)
  if [[ ! -d $libs ]]; then
    mkdir -p "$libs.partial"
    cp "$here/lib"/* "$libs.partial/"
    gunzip -f "$libs.partial"/*.gz
    mv "$libs.partial" "$libs"
  fi
fi
path=$libs
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /opt/torch/.venv/lib/python3.*/site-packages/nvidia/*/lib; do
  [[ -d $dir ]] && path=$path:$dir
done
export LD_LIBRARY_PATH=$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ $# -ge 1 ]] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
if [[ -x $here/bin/$1 ]]; then
  program=$here/bin/$1
  shift
  exec "$program" "$@"
fi
if [[ -f $here/bin/$1.gz ]]; then  # a compressed test program: unpacked once per bundle content
  bins=${TMPDIR:-/tmp}/loom-bundle-bin-$(id -u)-$(cksum <"$here/bin/$1.gz" | cut -d' ' -f1)
  if [[ ! -x $bins/$1 ]]; then
    mkdir -p "$bins"
    gunzip -c "$here/bin/$1.gz" >"$bins/$1.partial"
    chmod +x "$bins/$1.partial"
    mv "$bins/$1.partial" "$bins/$1"
  fi
  program=$bins/$1
  shift
  exec "$program" "$@"
fi
exec "$@"
RUN
chmod +x "$out/run.sh"
echo "gpu-bundle: $(du -sm "$out" | cut -f1) MiB in $out ($(ls "$out/bin" | wc -l) programs, $(ls "$out/lib" | wc -l) libraries)"
