#!/usr/bin/env bash
# Installs a built streamattn into a fresh prefix and uses it the two ways a downstream project
# would, then checks what the install tree promises:
#   1. a CMake project: find_package(streamattn) + streamattn::streamattn (cmake_consumer/),
#   2. a C99 program compiled with nothing but `pkg-config --cflags --libs streamattn`
#      (pkgconfig_consumer/), strict warnings as errors,
#   3. the library's SONAME, that it exports only sattn_*, and the installed tool; or, for the
#      static libstreamattn.a (BUILD_SHARED_LIBS=OFF), that every global symbol it defines is
#      sattn_* or in namespace streamattn, and the consumers link it with one line
#      (pkg-config --static) and carry no libstreamattn.so dependency.
# Usage: run_consumers.sh BUILD_DIR WORK_DIR   (WORK_DIR is emptied first; ctest passes both,
# and CC, CFLAGS, CXXFLAGS, LDFLAGS and CMAKE_CXX_COMPILER from the build being tested; a cross
# build also CMAKE_TOOLCHAIN_FILE, EMULATOR (the command that runs a target program: qemu-user),
# NM and READELF (its binutils) and PKG_CONFIG_LIBDIR (the target's .pc files))
set -euo pipefail
read -ra emulator <<<"${EMULATOR:-}"  # empty for a native build
nm=${NM:-nm}
readelf=${READELF:-readelf}
build=$(cd "$1" && pwd)
work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
work=$(cd "$work" && pwd)
prefix=$work/prefix

echo "== cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
check_shared_library() {
  echo "== SONAME and exported symbols"
  soname=$("$readelf" -d "$libdir/libstreamattn.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  echo "   SONAME $soname"
  [[ $soname =~ ^libstreamattn\.so\.[0-9]+$ ]] || { echo "bad SONAME '$soname'" >&2; exit 1; }
  [[ -e $libdir/$soname ]] || { echo "no $soname link in $libdir" >&2; exit 1; }
  others=$("$nm" -D --defined-only "$libdir/libstreamattn.so" | awk '$2 ~ /[TDBRVW]/ {print $3}' |
    grep -v '^sattn_' || true)
  [[ -z $others ]] || { echo "exported beyond sattn_*: $others" >&2; exit 1; }
}

# In an archive nothing is hidden: every strong global definition (nm T, D, B, R) could clash
# with an application's, so each must be sattn_* or mangled inside namespace streamattn (its
# functions, const members, vtables, typeinfo, guard variables and function-local statics).
check_static_library() {
  echo "== static archive: global symbols"
  local ours='^(sattn_|_Z(TV|TI|TS|GV|TH|TW)?Z?N[KVRO]*10streamattn)' others
  others=$("$nm" -g --defined-only "$static" 2>/dev/null | awk '$2 ~ /^[TDBR]$/ {print $3}' |
    grep -Ev "$ours" || true)
  [[ -z $others ]] || { echo "defined beyond sattn_* and streamattn::: $others" >&2; exit 1; }
  echo "   $("$nm" -g --defined-only "$static" | awk '$2 ~ /^[TDBR]$/' | wc -l)" \
    "strong globals, all ours"
}

shared=$(find "$prefix" -name 'libstreamattn.so.*.*.*' | head -n 1)
static=$(find "$prefix" -name 'libstreamattn.a' | head -n 1)
if [[ -n $shared ]]; then
  libdir=$(dirname "$shared")
  check_shared_library
elif [[ -n $static ]]; then
  libdir=$(dirname "$static")
  check_static_library
else
  echo "no libstreamattn.so.X.Y.Z or libstreamattn.a in $prefix" >&2; exit 1
fi

echo "== CMake consumer: find_package(streamattn)"
# CMake reads CXXFLAGS and LDFLAGS from the environment for a new build tree.
cmake -S "$here/cmake_consumer" -B "$work/cmake_consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release ${CMAKE_CXX_COMPILER:+-DCMAKE_CXX_COMPILER="$CMAKE_CXX_COMPILER"} \
  ${CMAKE_TOOLCHAIN_FILE:+-DCMAKE_TOOLCHAIN_FILE="$CMAKE_TOOLCHAIN_FILE"} \
  >"$work/cmake_consumer.log"
cmake --build "$work/cmake_consumer" >>"$work/cmake_consumer.log"
"${emulator[@]}" "$work/cmake_consumer/consumer"  # its build RPATH points at the install tree
if [[ -n $static ]] && "$readelf" -d "$work/cmake_consumer/consumer" | grep -q libstreamattn; then
  echo "the CMake consumer of the static library needs a libstreamattn.so" >&2; exit 1
fi

echo "== pkg-config consumer: C99, -Wall -Wextra -Werror -pedantic"
export PKG_CONFIG_PATH=$libdir/pkgconfig
pc_static=${static:+--static}
# shellcheck disable=SC2086  # empty or one flag
flags=$(pkg-config $pc_static --cflags --libs streamattn)
echo "   pkg-config $pc_static${pc_static:+ }--cflags --libs streamattn: $flags"
# shellcheck disable=SC2086  # flag lists, split on purpose
"${CC:-cc}" -std=c99 -Wall -Wextra -Werror -pedantic ${CFLAGS:-} "$here/pkgconfig_consumer/main.c" \
  $flags ${LDFLAGS:-} -o "$work/c_consumer"
LD_LIBRARY_PATH=$libdir "${emulator[@]}" "$work/c_consumer"
if [[ -n $static ]]; then
  echo "== bindings/c/runner_example.c on the static library: its own pthreads as the runner"
  # shellcheck disable=SC2086  # flag lists, split on purpose
  "${CC:-cc}" -std=c99 -Wall -Wextra -Werror -pedantic ${CFLAGS:-} \
    "$here/../../bindings/c/runner_example.c" $flags -lpthread ${LDFLAGS:-} -o "$work/runner_example"
  "${emulator[@]}" "$work/runner_example"
fi

echo "== installed tool"
if [[ -x $prefix/bin/streamattn ]]; then
  # Its RPATH finds the library in the prefix.
  info=$("${emulator[@]}" "$prefix/bin/streamattn" info)
  echo "   ${info%%$'\n'*}"
fi
echo "install consumers: all passed"
