# One torch per binary: find_package(Torch) for the torch of MUTWO_PYTHON
# (or Torch_DIR), so that every target links that torch's libraries and no
# other, whatever else the machine has (docs/testing.md, "One torch per
# binary"). Included by CMakeLists.txt with MUTWO_TORCH_LIB set to that
# torch's lib folder; defines mutwo_check_one_torch(target).
#
# The cause it removes: TorchConfig.cmake looks c10 (and torch, c10_cuda,
# kineto) up with find_library(... PATHS <torch>/lib), and find_library
# searches the system's folders before PATHS. On a machine that also has
# Debian's libtorch-dev (torch 1.13), c10_LIBRARY became /usr/lib's libc10.so,
# and every target that lists ${TORCH_LIBRARIES} itself (mutwo_tests,
# mutwo_torch) linked libc10.so.1.13 beside the wheel's libc10.so. (The CLI
# got it only through static libraries, after the wheel's link options had
# turned on --as-needed, and the linker dropped it.)

get_filename_component(MUTWO_TORCH_LIB "${MUTWO_TORCH_LIB}" REALPATH)
if(NOT IS_DIRECTORY "${MUTWO_TORCH_LIB}")
  message(FATAL_ERROR "the configured torch has no lib folder at ${MUTWO_TORCH_LIB}: pass -DMUTWO_PYTHON=<a python "
                      "with the torch wheel> (or -DTorch_DIR=<torch>/share/cmake/Torch)")
endif()

# A library of torch's (c10, torch, torch_cpu, c10_cuda, kineto, ...) by file name.
set(mutwo_torch_library_regex "^lib(c10|torch|shm|caffe2|kineto)[A-Za-z0-9_]*\\.(so|a)")

# A build folder configured before this rule may have cached another torch's
# library: forget it, so that it is looked up again below.
get_cmake_property(mutwo_cache_vars CACHE_VARIABLES)
foreach(var IN LISTS mutwo_cache_vars)
  if(var MATCHES "_LIBRARY$" AND IS_ABSOLUTE "${${var}}")
    get_filename_component(name "${${var}}" NAME)
    get_filename_component(dir "${${var}}" DIRECTORY)
    get_filename_component(dir "${dir}" REALPATH)
    if(name MATCHES "${mutwo_torch_library_regex}" AND NOT dir STREQUAL MUTWO_TORCH_LIB)
      message(STATUS "mutwo: ${var} was ${${var}}, not the configured torch's: looked up again")
      unset(${var} CACHE)
    endif()
  endif()
endforeach()

# CMAKE_LIBRARY_PATH is searched before the system's folders: the configured
# torch's lib folder first, for TorchConfig.cmake's find_library calls only.
set(mutwo_saved_library_path "${CMAKE_LIBRARY_PATH}")
list(PREPEND CMAKE_LIBRARY_PATH "${MUTWO_TORCH_LIB}")
find_package(Torch REQUIRED)
set(CMAKE_LIBRARY_PATH "${mutwo_saved_library_path}")

# The check at configure time: every file of torch's that ${TORCH_LIBRARIES}
# resolves to (imported targets followed through their interface links) is
# in MUTWO_TORCH_LIB.
set(mutwo_queue ${TORCH_LIBRARIES} ${TORCH_LIBRARY})
set(mutwo_seen "")
set(mutwo_mixed "")
while(mutwo_queue)
  list(POP_FRONT mutwo_queue item)
  if(item IN_LIST mutwo_seen)
    continue()
  endif()
  list(APPEND mutwo_seen "${item}")
  if(TARGET "${item}")
    get_target_property(type "${item}" TYPE)
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(configs "${item}" IMPORTED_CONFIGURATIONS)
      foreach(config IN ITEMS "" LISTS configs)
        set(suffix "")
        if(config)
          set(suffix "_${config}")
        endif()
        get_target_property(location "${item}" IMPORTED_LOCATION${suffix})
        if(location)
          list(APPEND mutwo_queue "${location}")
        endif()
      endforeach()
    endif()
    get_target_property(links "${item}" INTERFACE_LINK_LIBRARIES)
    if(links)
      # "-Wl,--no-as-needed,\"$<TARGET_FILE:torch_cpu>\" -Wl,--as-needed": the target inside.
      string(REGEX MATCHALL "\\$<TARGET_(FILE|PROPERTY):[A-Za-z0-9_:]+" inside "${links}")
      string(REGEX REPLACE "\\$<TARGET_(FILE|PROPERTY):" "" inside "${inside}")
      list(APPEND mutwo_queue ${links} ${inside})
    endif()
  elseif(IS_ABSOLUTE "${item}")
    get_filename_component(name "${item}" NAME)
    get_filename_component(dir "${item}" DIRECTORY)
    get_filename_component(dir "${dir}" REALPATH)
    if(name MATCHES "${mutwo_torch_library_regex}" AND NOT dir STREQUAL MUTWO_TORCH_LIB)
      list(APPEND mutwo_mixed "${item}")
    endif()
  endif()
endwhile()
if(mutwo_mixed)
  list(JOIN mutwo_mixed ", " mutwo_mixed)
  message(FATAL_ERROR "mutwo would link libraries of another torch (${mutwo_mixed}) beside the configured torch's, "
                      "in ${MUTWO_TORCH_LIB}, which has no library of that name. Take that torch off the linker's "
                      "search path (CMAKE_LIBRARY_PATH, CMAKE_PREFIX_PATH; Debian: apt remove libtorch-dev), or point "
                      "-DMUTWO_PYTHON (or -DTorch_DIR) at the torch to use; docs/testing.md, 'One torch per binary'")
endif()

# The check after the build: the linked file itself (ldd: what the dynamic
# linker resolves, libraries' own dependencies included) loads torch from
# MUTWO_TORCH_LIB only; a mix fails the build.
function(mutwo_check_one_torch target)
  add_custom_command(TARGET ${target} POST_BUILD
                     COMMAND "${MUTWO_PYTHON}" "${CMAKE_SOURCE_DIR}/scripts/check-one-torch.py"
                             --torch-lib "${MUTWO_TORCH_LIB}" --quiet "$<TARGET_FILE:${target}>"
                     VERBATIM)
endfunction()
