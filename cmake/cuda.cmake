# CUDA is optional: AUTO enables it when nvcc is found. The arch list is explicit (never probed
# from a GPU at build time) and is passed to the code so that dispatch can consult it.
set(H3RT_HAVE_CUDA OFF)
if(NOT H3RT_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES ${H3RT_CUDA_ARCHS})
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flag; nvcc >= 12 accepts -std=c++20.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(H3RT_HAVE_CUDA ON)
  elseif(H3RT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "H3RT_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "h3rt: CUDA backend ${H3RT_HAVE_CUDA} (archs: ${H3RT_CUDA_ARCHS})")

# CUTLASS/CuTe headers: from H3RT_CUTLASS_DIR, or the nvidia-cutlass wheel unpacked in .deps.
set(H3RT_CUTLASS_DIR "${H3RT_DEPS_DIR}/cutlass/include" CACHE PATH "CUTLASS include folder")
# The sm_90a CUTLASS kernels (two TUs, 45-105 s each on 2 cores) can be left out where only
# compilation is checked (CI, to keep its time); the mma.sync int8 GEMM of sm_120/121 is always
# built when the headers are there.
option(H3RT_CUTLASS_SM90 "With CUTLASS headers: build the sm_90a CUTLASS GEMMs" ON)
# pip builds (scikit-build-core) run no install script first: where the default folder has no
# CUTLASS headers, fetch them as tools/install_cutlass.sh does (the nvidia-cutlass wheel alone,
# headers only, into .deps/cutlass; a failed download leaves the build on cuBLASLt), so that
# `pip install ./python` gets the CUTLASS int8 GEMMs, the only fast int8 path on sm_120/121.
if(H3RT_HAVE_CUDA AND DEFINED SKBUILD AND NOT EXISTS "${H3RT_CUTLASS_DIR}/cutlass/cutlass.h" AND
   H3RT_CUTLASS_DIR STREQUAL "${H3RT_DEPS_DIR}/cutlass/include")
  message(STATUS "h3rt: no CUTLASS headers in ${H3RT_CUTLASS_DIR}: tools/install_cutlass.sh")
  execute_process(COMMAND bash "${CMAKE_SOURCE_DIR}/tools/install_cutlass.sh"
                          "${H3RT_DEPS_DIR}/cutlass")
endif()
if(H3RT_HAVE_CUDA)
  if(EXISTS "${H3RT_CUTLASS_DIR}/cutlass/cutlass.h")
    message(STATUS "h3rt: CUTLASS headers in ${H3RT_CUTLASS_DIR} (CUTLASS GEMMs built; sm_90a "
                   "ones: ${H3RT_CUTLASS_SM90})")
  else()
    message(STATUS "h3rt: no CUTLASS headers in ${H3RT_CUTLASS_DIR}: int8 GEMMs run cuBLASLt + "
                   "an epilogue kernel (tools/install_cutlass.sh adds the faster CUTLASS paths)")
  endif()
endif()

function(h3rt_configure_cuda_target target)
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${H3RT_CUDA_ARCHS}"
                                             CUDA_SEPARABLE_COMPILATION OFF)
  string(REPLACE ";" "," _archs "${H3RT_CUDA_ARCHS}")
  target_compile_definitions(${target} PUBLIC H3RT_HAVE_CUDA=1 H3RT_CUDA_ARCH_LIST="${_archs}")
  target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo -Xcompiler=-Wall>)
  target_link_libraries(${target} PUBLIC CUDA::cudart CUDA::cublasLt CUDA::cublas)
  if(TARGET CUDA::cupti)  # kernel launch counts in benchmark reports
    target_link_libraries(${target} PUBLIC CUDA::cupti)
    target_compile_definitions(${target} PUBLIC H3RT_HAVE_CUPTI=1)
  endif()
  if(EXISTS "${H3RT_CUTLASS_DIR}/cutlass/cutlass.h")
    target_include_directories(${target} SYSTEM PRIVATE "${H3RT_CUTLASS_DIR}")
    target_compile_definitions(${target} PRIVATE H3RT_HAVE_CUTLASS=1)
    if(NOT H3RT_CUTLASS_SM90)
      target_compile_definitions(${target} PRIVATE H3RT_NO_CUTLASS_SM90=1)
    endif()
  endif()
endfunction()

# CUDA sources without device code (no __global__, no <<<, no .cuh include: host code calling the
# runtime, cuBLASLt and our kernels' launchers) are compiled by the host compiler with the
# runtime header nvcc would include: nvcc would run its device front end once per arch for
# nothing (about a third of CI's CUDA compile time). A misclassified file fails to compile; it
# cannot compile into something else.
function(h3rt_compile_host_only_cuda_sources)
  foreach(f IN LISTS ARGN)
    file(STRINGS "${f}" device_lines REGEX "__global__|<<<|\\.cuh\"")
    if(NOT device_lines)
      set_source_files_properties("${f}" PROPERTIES LANGUAGE CXX
                                  COMPILE_OPTIONS "-include;cuda_runtime.h")
    endif()
  endforeach()
endfunction()
