# Compiler cache: compiles through ccache when it is installed (scripts/install-deps.sh installs it)
# and CHORUS_CCACHE is ON (the default), unless a compiler launcher is already set.
#
# The cache is keyed on paths relative to the repository root (CCACHE_BASEDIR) and ignores the
# working directory (CCACHE_NOHASHDIR), so a fresh clone in another folder, and the sanitizer and
# fuzz builds of one clone, reuse what any earlier build compiled. That is what keeps `make test`
# on a clean clone from compiling the whole tree three times over (scripts/make_test_beside_hog.sh
# runs it again and again). A hit gives the object the compiler would have given, except that its
# debug information names the folder of the build that first compiled it.
option(CHORUS_CCACHE "Compile through ccache when it is installed" ON)
get_filename_component(chorusRepositoryRoot "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
find_program(CHORUS_CCACHE_PROGRAM ccache)
if(CHORUS_CCACHE AND CHORUS_CCACHE_PROGRAM AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${chorusRepositoryRoot} CCACHE_NOHASHDIR=true
      ${CHORUS_CCACHE_PROGRAM})
  message(STATUS "chorus: compiling through ${CHORUS_CCACHE_PROGRAM}")
endif()
