# find_package(torchvendor): build a vendor's runtime library and eager kernel library against an
# installed torchvendor (docs/runtime.md, "Building out of tree").
#
#   torchvendor::runtime   INTERFACE target: the C headers (torchvendor/runtime.h, sim_kernel.h,
#                          kernel_api.h). A runtime library needs nothing else, and never torch.
#   torchvendor_add_kernel_library(<name> TORCH_TARGET <major.minor> SOURCES <files...>)
#                          a shared library of eager kernels on PyTorch's stable ABI: torch's
#                          headers with TORCH_TARGET_VERSION set (so torch's unstable headers
#                          refuse to compile), linked to libtorch_cpu for the C shim.
#
# Variables: torchvendor_INCLUDE_DIRS, torchvendor_VERSION, TORCHVENDOR_TORCH_DIR (the torch
# package folder used for kernel libraries; default: the torch beside torchvendor, override with
# -DTORCHVENDOR_TORCH_DIR=/path/to/site-packages/torch).
get_filename_component(_tv_root "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(torchvendor_INCLUDE_DIRS "${_tv_root}/include")
set(torchvendor_VERSION "@PROJECT_VERSION@")
if(NOT EXISTS "${torchvendor_INCLUDE_DIRS}/torchvendor/runtime.h")
  set(torchvendor_FOUND FALSE)
  set(torchvendor_NOT_FOUND_MESSAGE "${torchvendor_INCLUDE_DIRS}/torchvendor/runtime.h is missing; reinstall torchvendor")
  return()
endif()
if(NOT TARGET torchvendor::runtime)
  add_library(torchvendor::runtime INTERFACE IMPORTED)
  set_target_properties(torchvendor::runtime PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${torchvendor_INCLUDE_DIRS}")
endif()
if(NOT TORCHVENDOR_TORCH_DIR)
  get_filename_component(TORCHVENDOR_TORCH_DIR "${_tv_root}/../torch" ABSOLUTE)
endif()

function(torchvendor_add_kernel_library name)
  cmake_parse_arguments(TV "" "TORCH_TARGET" "SOURCES" ${ARGN})
  if(NOT TV_TORCH_TARGET MATCHES "^([0-9]+)\\.([0-9]+)$")
    message(FATAL_ERROR "torchvendor_add_kernel_library(${name}): TORCH_TARGET must be the oldest "
      "torch release the library must load on, as major.minor (e.g. 2.11); got '${TV_TORCH_TARGET}'")
  endif()
  set(_major ${CMAKE_MATCH_1})
  set(_minor ${CMAKE_MATCH_2})
  if(NOT EXISTS "${TORCHVENDOR_TORCH_DIR}/include/torch/csrc/stable/library.h")
    message(FATAL_ERROR "torchvendor_add_kernel_library(${name}): no torch with stable-ABI headers at "
      "${TORCHVENDOR_TORCH_DIR}; pass -DTORCHVENDOR_TORCH_DIR=<site-packages>/torch")
  endif()
  find_library(_tv_torch_cpu torch_cpu PATHS "${TORCHVENDOR_TORCH_DIR}/lib" NO_DEFAULT_PATH REQUIRED)
  add_library(${name} SHARED ${TV_SOURCES})
  math(EXPR _version "(${_major} << 8) | ${_minor}" OUTPUT_FORMAT HEXADECIMAL)
  string(REPLACE "0x" "" _version "${_version}")
  string(LENGTH "${_version}" _len)
  if(_len LESS 4)
    set(_version "0${_version}")
  endif()
  target_compile_definitions(${name} PRIVATE
    TORCH_TARGET_VERSION=0x${_version}000000000000ULL
    TV_KERNELS_TORCH_TARGET="${_major}.${_minor}")
  target_include_directories(${name} PRIVATE "${torchvendor_INCLUDE_DIRS}")
  target_include_directories(${name} SYSTEM PRIVATE "${TORCHVENDOR_TORCH_DIR}/include")
  # Linked by SONAME (libtorch_cpu.so, unversioned): it binds to whichever torch is loaded.
  target_link_libraries(${name} PRIVATE "${_tv_torch_cpu}")
  # Hidden visibility and no GNU-unique symbols: dlclose must be able to unload the library
  # (torchvendor unloads one whose registrations it refuses, which deregisters its kernels).
  target_compile_options(${name} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-fno-gnu-unique>)
  set_target_properties(${name} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON SKIP_BUILD_RPATH ON)
endfunction()
