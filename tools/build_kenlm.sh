#!/usr/bin/env bash
# Build KenLM's programs (lmplz, build_binary, query, filter, interpolate,
# count_ngrams, fragment) from the C++ sources inside the PyPI `kenlm` sdist, for the
# tests and benchmarks that compare nplm with KenLM's own programs.  Nothing of KenLM
# enters the repository: the sdist is fetched by pip and built in a cache folder
# outside it, reused while its binaries are there.
#
#   tools/build_kenlm.sh            # prints the folder that holds the programs
#   NPLM_KENLM_CACHE=DIR tools/build_kenlm.sh
#
# Needs cmake, a C++ compiler, Boost (program_options, system, thread), zlib, bzip2,
# liblzma and Eigen 3 (interpolate); .ci/run installs them from Debian's packages.
set -euo pipefail
VERSION="${NPLM_KENLM_VERSION:-0.3.0}"
CACHE="${NPLM_KENLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nplm/kenlm-$VERSION}"
PROGRAMS=(lmplz build_binary query filter interpolate count_ngrams fragment)

have_all() {
    for p in "${PROGRAMS[@]}"; do [ -x "$CACHE/bin/$p" ] || return 1; done
}
if have_all; then
    echo "$CACHE/bin"
    exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/nplm-kenlm-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$work" "kenlm==$VERSION" >&2
tar -xzf "$work"/kenlm-"$VERSION".tar.gz -C "$work"
cmake -S "$work/kenlm-$VERSION" -B "$work/build" -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$work/build" --parallel "$(nproc)" --target "${PROGRAMS[@]}" >&2
mkdir -p "$CACHE/bin.tmp"
for p in "${PROGRAMS[@]}"; do cp "$work/build/bin/$p" "$CACHE/bin.tmp/"; done
rm -rf "$CACHE/bin" && mv "$CACHE/bin.tmp" "$CACHE/bin"
echo "$CACHE/bin"
