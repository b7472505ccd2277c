# Sanitizer and fuzzing builds (CPU only, in their own build folder; tools/sanitize.sh and
# tools/fuzz.sh configure them):
#   H3RT_SANITIZE=address,undefined  every target built and linked with these sanitizers; any
#                                    UBSan report aborts (-fno-sanitize-recover)
#   H3RT_FUZZ=ON                     the libFuzzer targets of tests/fuzz (clang only); the library's
#                                    parsing side gets coverage instrumentation (see below);
#                                    H3RT_SANITIZE defaults to address,undefined
set(H3RT_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. address,undefined (CPU only)")
option(H3RT_FUZZ "Build the libFuzzer targets of tests/fuzz (clang only, CPU only)" OFF)

if(H3RT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "H3RT_FUZZ needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(H3RT_SANITIZE STREQUAL "")
    set(H3RT_SANITIZE "address,undefined")
  endif()
endif()

if(NOT H3RT_SANITIZE STREQUAL "")
  if(H3RT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "H3RT_SANITIZE builds the CPU backend only: -DH3RT_CUDA=OFF")
  endif()
  set(H3RT_CUDA OFF CACHE STRING "" FORCE)
  set(_h3rt_san -fsanitize=${H3RT_SANITIZE} -fno-omit-frame-pointer)
  if(H3RT_SANITIZE MATCHES "undefined")
    # Report and stop at the first finding (a test then fails instead of printing).
    list(APPEND _h3rt_san -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${_h3rt_san})
  add_link_options(${_h3rt_san})
  message(STATUS "h3rt: sanitizers ${H3RT_SANITIZE}")
endif()

# Coverage feedback for the fuzzers: every library source except the compute kernels of
# src/ops (their loops are not what the fuzzers explore, and the instrumentation of every
# compare there made the model-level tests of the same build several times slower). The tests
# themselves get none.
function(h3rt_fuzz_instrument)
  if(NOT H3RT_FUZZ)
    return()
  endif()
  foreach(src IN LISTS ARGN)
    if(NOT src MATCHES "/src/ops/")
      set_property(SOURCE ${src} APPEND PROPERTY COMPILE_OPTIONS -fsanitize=fuzzer-no-link)
    endif()
  endforeach()
  message(STATUS "h3rt: libFuzzer targets (tests/fuzz)")
endfunction()
