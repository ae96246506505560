# Sanitizer and fuzzing flags for every target: LOOM_SANITIZE=address,undefined builds the code the
# tests run under AddressSanitizer and UBSan (the `asan` preset); LOOM_FUZZ adds libFuzzer's
# coverage instrumentation (the `fuzz` preset, clang only). Any report aborts: nothing is recovered.
if(LOOM_SANITIZE)
  add_compile_options(-fsanitize=${LOOM_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${LOOM_SANITIZE})
endif()
if(LOOM_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "LOOM_FUZZ needs clang (libFuzzer): configure with --preset fuzz or CMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
