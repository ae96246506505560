#!/usr/bin/env bash
# Gathers what a lent GPU machine needs to run Loom into one folder small enough to carry there:
# the built `loom`, the executor's test binaries and the shared libraries they load that such a
# machine lacks, plus `run.sh`, which points the loader at the bundle's libraries and at the machine's
# own CUDA (/usr/local/cuda, the NVIDIA wheels of its PyTorch venv) and runs a command:
#   scripts/gpu-bundle.sh OUTDIR [BUILD_DIR]      then, on the GPU machine: OUTDIR/run.sh loom --version
# CUDA's own libraries (cudart, cuBLAS, cuDNN, NCCL, the driver) and the C library stay behind: the GPU
# machine's must be used. Libraries over 256 KiB and the test programs travel gzip-compressed and are
# unpacked on first use into a cache directory named after the bundle's content.
# A build linked with Open MPI takes Open MPI along (mpirun, its plugins, help files and settings under
# openmpi/): run.sh points Open MPI at that copy (OPAL_PREFIX and the OPAL_*DIR variables, which Open MPI
# reads in place of its configured paths), so `run.sh mpirun -np 4 loom run --backend cuda ...` runs
# several ranks on the machine's one GPU (their messages staged through host memory).
set -euo pipefail

usage() { echo "usage: $0 OUTDIR [BUILD_DIR]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
out=$1
build=${2:-$(dirname "$0")/../build}
[[ -x $build/cli/loom ]] || { echo "gpu-bundle: no $build/cli/loom: build first" >&2; exit 2; }

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
binaries=("$build/cli/loom")
# Not the tests of the planner, simulator, command line and pure host code: none of them can reach a GPU
# (CI runs them), and they were a tenth of the bundle when it outgrew its 48 MiB (2026-11-28).
host_only='^(planner|sim|core|config_rules|cli|validate_cli|loom_kernels|exec_crc32c|exec_durable_file|exec_data_loader|exec_mpi_dtype)_test$'
while IFS= read -r test; do
  [[ $(basename "$test") =~ $host_only ]] || binaries+=("$test")
done < <(find "$build/tests" -maxdepth 2 -type f -executable -name '*_test' ! -path '*/gui/*' | sort)

# The executor tests' model files, found through LOOM_TEST_SOURCE_DIR (tests/exec/run_util.cc).
mkdir -p "$out/source/tests/exec"
cp -r "$(dirname "$0")/../tests/exec/data" "$out/source/tests/exec/"

# Left out: the GPU machine brings its own CUDA stack; glibc and the loader must be the system's.
skip='^(libcuda|libcudart|libcublas|libcudnn|libnccl|libnvidia|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|ld-linux|linux-vdso)'
# The shared libraries `file` loads that the bundle does not have yet.
bundle_libraries() {
  ldd "$1" | awk '/=> \// { print $1, $3 }' | while read -r name path; do
    [[ $name =~ $skip || -e $out/lib/$name || -e $out/lib/$name.gz ]] && continue
    if (($(stat -L -c %s "$path") > 256 * 1024)); then
      gzip -9 -c "$path" >"$out/lib/$name.gz"
    else
      cp -L "$path" "$out/lib/$name"
    fi
  done
}
for binary in "${binaries[@]}"; do
  name=$(basename "$binary")
  cp "$binary" "$out/bin/"
  strip --strip-unneeded "$out/bin/$name"
  [[ $name != loom ]] && gzip -9 "$out/bin/$name"  # loom stays runnable in place: mpirun starts it
  bundle_libraries "$binary"
done
if ldd "$build/cli/loom" | grep -q libmpi; then
  command -v ompi_info >/dev/null || { echo "gpu-bundle: loom links MPI but ompi_info (Open MPI) is missing" >&2; exit 2; }
  path_of() { ompi_info --path "$1" | awk -F': ' '{ print $2 }' | tr -d ' '; }
  mpi=$out/openmpi
  mkdir -p "$mpi/bin" "$mpi/lib" "$mpi/share" "$mpi/etc"
  launcher=$(readlink -f "$(command -v mpirun)")
  cp "$launcher" "$mpi/bin/$(basename "$launcher")"
  [[ $(basename "$launcher") == mpirun ]] || ln -s "$(basename "$launcher")" "$mpi/bin/mpirun"
  [[ -x $(dirname "$launcher")/orted ]] && cp "$(dirname "$launcher")/orted" "$mpi/bin/"
  # The plugins keep their place below libdir (pkglibdir = libdir/openmpi3 on Debian), which Open MPI
  # finds again from OPAL_LIBDIR.
  libdir=$(path_of libdir)
  pkglibdir=$(path_of pkglibdir)
  plugins=$mpi/lib/${pkglibdir#"$libdir"/}
  mkdir -p "$plugins"
  cp -L "$pkglibdir"/*.so "$plugins/"
  cp -rL "$(path_of pkgdatadir)" "$mpi/share/"
  cp -L "$(path_of sysconfdir)"/openmpi-mca-params.conf "$mpi/etc/" 2>/dev/null || true
  for f in "$mpi/bin"/* "$plugins"/*.so; do bundle_libraries "$f"; done
  tar -czf "$out/openmpi.tar.gz" -C "$out" openmpi  # unpacked beside the libraries by run.sh
  rm -rf "$mpi"
fi

cat >"$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs a command with the bundle's libraries and this machine's CUDA libraries on the loader path;
# a first word naming a bundled program (loom, loom_kernels_gpu_test, ...) runs the bundled one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The compressed libraries (and Open MPI) unpacked once per bundle content; a run.sh beside this one
# that unpacks at the same moment keeps its own copy until the rename, and the loser drops it.
cache=${TMPDIR:-/tmp}/loom-bundle-$(id -u)-$(cat "$here/stamp")
if [[ ! -d $cache ]]; then
  partial=$cache.partial.$$
  rm -rf "$partial"
  mkdir -p "$partial/lib"
  cp "$here/lib"/* "$partial/lib/"
  if compgen -G "$partial/lib/*.gz" >/dev/null; then gunzip -f "$partial/lib"/*.gz; fi
  if [[ -f $here/openmpi.tar.gz ]]; then tar -xzf "$here/openmpi.tar.gz" -C "$partial"; fi
  mv -T "$partial" "$cache" 2>/dev/null || rm -rf "$partial"
fi
libs=$cache/lib
path=$libs
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /opt/torch/.venv/lib/python3.*/site-packages/nvidia/*/lib; do
  [[ -d $dir ]] && path=$path:$dir
done
export LD_LIBRARY_PATH=$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# What the test programs start and read (tests/exec/run_util.cc).
export LOOM_TEST_LOOM=$here/bin/loom LOOM_TEST_SOURCE_DIR=$here/source
export PATH=$here/bin:$PATH  # `run.sh mpirun -np 4 loom run ...` finds the bundled loom
if [[ -d $cache/openmpi ]]; then  # the bundled Open MPI, wherever it was unpacked
  mpi=$cache/openmpi
  export OPAL_PREFIX=$mpi OPAL_EXEC_PREFIX=$mpi OPAL_BINDIR=$mpi/bin OPAL_LIBDIR=$mpi/lib OPAL_DATADIR=$mpi/share \
    OPAL_DATAROOTDIR=$mpi/share OPAL_PKGDATADIR=$mpi/share/openmpi OPAL_SYSCONFDIR=$mpi/etc
  export PATH=$mpi/bin:$PATH LOOM_TEST_MPIEXEC=$mpi/bin/mpirun
  [[ $(id -u) == 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # lent machines run as root
  # The bundled PMIx finds no zlib plugin it can load there and says so in 20 lines a rank (harmless:
  # it only compresses large start-up messages); the logs of 2026-11-28 were half that notice. The first
  # variable is the one the notice names; the second, PMIx's load-error switch, is not yet seen to work.
  export PMIX_MCA_pcompress_base_silence_warning=1 PMIX_MCA_mca_base_component_show_load_errors=0
fi
[[ $# -ge 1 ]] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
if [[ -x $here/bin/$1 ]]; then
  program=$here/bin/$1
  shift
  exec "$program" "$@"
fi
if [[ -f $here/bin/$1.gz ]]; then  # a compressed test program: unpacked once per bundle content
  bins=$cache/bin
  if [[ ! -x $bins/$1 ]]; then
    mkdir -p "$bins"
    gunzip -c "$here/bin/$1.gz" >"$bins/$1.partial.$$"
    chmod +x "$bins/$1.partial.$$"
    mv "$bins/$1.partial.$$" "$bins/$1"
  fi
  program=$bins/$1
  shift
  exec "$program" "$@"
fi
exec "$@"
RUN
chmod +x "$out/run.sh"
# run.sh's cache key: the bundle's content.
find "$out" -type f ! -name stamp -print0 | sort -z | xargs -0 cat | cksum | cut -d' ' -f1 >"$out/stamp"
echo "gpu-bundle: $(du -sm "$out" | cut -f1) MiB in $out ($(ls "$out/bin" | wc -l) programs, $(ls "$out/lib" | wc -l) libraries)"
