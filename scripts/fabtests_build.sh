#!/bin/sh
# Builds libfabric's conformance suite (fabtests) against the installed
# libfabric, outside the sources: from TMX_FABTESTS_TARBALL (default
# ../shared/conformance/fabtests-1.17.1.tar.gz beside this checkout) into
# TMX_FABTESTS_DIR (default build/fabtests, which git ignores). The ctest
# test fab_fabtests runs it; without the tarball it is skipped.
set -eu
cd "$(dirname "$0")/.."
tarball=${TMX_FABTESTS_TARBALL:-../shared/conformance/fabtests-1.17.1.tar.gz}
dir=${TMX_FABTESTS_DIR:-build/fabtests}
if [ ! -f "$tarball" ]; then
    echo "fabtests: no $tarball, the conformance suite is not built"
    exit 0
fi
if [ -x "$dir/fabtests/install/bin/fi_rdm_tagged_pingpong" ] && [ "$dir/.stamp" -nt "$tarball" ]; then
    echo "fabtests: already built in $dir"
    exit 0
fi
rm -rf "$dir"
mkdir -p "$dir"
tar -xzf "$tarball" -C "$dir"
cd "$dir/fabtests"
echo "fabtests: building in $dir (a few minutes)"
./autogen.sh >../build.log 2>&1 && ./configure --prefix="$PWD/install" >>../build.log 2>&1 &&
    make -j"$(nproc)" install >>../build.log 2>&1 || { tail -n 30 ../build.log; exit 1; }
touch ../.stamp
echo "fabtests: built, $PWD/install/bin"
