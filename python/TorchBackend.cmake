# chorus.torch._c10d: the "chorus" torch.distributed backend (python/src/torch/), built against the
# torch that ${Python3_EXECUTABLE} imports (its headers: Debian's libtorch-dev for torch 1.13, the
# wheel's own include/ for torch 2). CHORUS_WITH_TORCH is ON by default when those headers are there.
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c
          "import os, torch, torch.utils.cpp_extension as e; v = torch.__version__.split('.'); \
print(';'.join([v[0], v[1], str(int(torch._C._GLIBCXX_USE_CXX11_ABI)), \
os.path.join(os.path.dirname(torch.__file__), 'lib')] + e.include_paths()))"
  OUTPUT_VARIABLE chorusTorch
  ERROR_QUIET
  RESULT_VARIABLE chorusTorchStatus
  OUTPUT_STRIP_TRAILING_WHITESPACE)
set(chorusTorchFound OFF)
if(chorusTorchStatus EQUAL 0)
  list(POP_FRONT chorusTorch chorusTorchMajor chorusTorchMinor chorusTorchAbi chorusTorchLib)
  find_path(CHORUS_TORCH_C10D_INCLUDE torch/csrc/distributed/c10d/ProcessGroup.hpp
            HINTS ${chorusTorch} NO_DEFAULT_PATH)
  if(CHORUS_TORCH_C10D_INCLUDE)
    set(chorusTorchFound ON)
  endif()
endif()
option(CHORUS_WITH_TORCH "Build the chorus torch.distributed backend" ${chorusTorchFound})
if(CHORUS_WITH_TORCH AND NOT chorusTorchFound)
  message(FATAL_ERROR "CHORUS_WITH_TORCH is ON but torch's C++ headers were not found (install "
                      "libtorch-dev for Debian's python3-torch)")
endif()
message(STATUS "chorus: torch.distributed backend ${CHORUS_WITH_TORCH}")
if(NOT CHORUS_WITH_TORCH)
  return()
endif()

foreach(library torch torch_cpu c10 torch_python)
  find_library(chorusTorchLibrary_${library} ${library} HINTS ${chorusTorchLib} REQUIRED
               NO_DEFAULT_PATH)
  list(APPEND chorusTorchLibraries ${chorusTorchLibrary_${library}})
endforeach()
pybind11_add_module(_c10d MODULE
  src/torch/monitored_barrier.cc
  src/torch/process_group.cc
  src/torch/process_group_all_to_all.cc
  src/torch/sparse_allreduce.cc
  src/torch/torch_module.cc
  src/torch/torch_store.cc
  src/torch/torch_streams.cc
  src/torch/torch_tensors.cc
  src/torch/torch_work.cc
)
target_include_directories(_c10d SYSTEM PRIVATE ${chorusTorch})
target_include_directories(_c10d PRIVATE ${PROJECT_SOURCE_DIR}/include)
# CUDA tensors need c10::Stream::native_handle (torch >= 2.3): torch_streams.h.
if(chorusTorchMajor GREATER 2 OR (chorusTorchMajor EQUAL 2 AND chorusTorchMinor GREATER_EQUAL 3))
  set(chorusTorchCudaStreams 1)
else()
  set(chorusTorchCudaStreams 0)
endif()
message(STATUS "chorus: torch backend takes CUDA tensors: ${chorusTorchCudaStreams}")
target_compile_definitions(_c10d PRIVATE CHORUS_TORCH_MAJOR=${chorusTorchMajor}
                                         CHORUS_TORCH_MINOR=${chorusTorchMinor}
                                         CHORUS_TORCH_CUDA_STREAMS=${chorusTorchCudaStreams}
                                         _GLIBCXX_USE_CXX11_ABI=${chorusTorchAbi})
target_link_libraries(_c10d PRIVATE chorus ${chorusTorchLibraries})
file(RELATIVE_PATH chorusLibraryFromTorchPackage
     ${CMAKE_INSTALL_PREFIX}/${CHORUS_PYTHON_INSTALL_DIR}/chorus/torch
     ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR})
set_target_properties(_c10d PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CHORUS_PYTHON_DIR}/torch
  CXX_VISIBILITY_PRESET hidden
  BUILD_RPATH "${CMAKE_BINARY_DIR}/lib;${chorusTorchLib}"
  INSTALL_RPATH "$ORIGIN/${chorusLibraryFromTorchPackage};${chorusTorchLib}")
add_dependencies(_c10d chorus_python_files)
install(TARGETS _c10d LIBRARY DESTINATION ${CHORUS_PYTHON_INSTALL_DIR}/chorus/torch)
