# Third-party dependencies. On Debian 12 they come from apt (scripts/install-deps.sh). On the GPU machine
# a CUDA libtorch comes through CMAKE_PREFIX_PATH and the other libraries from a folder of unpacked Debian
# packages (DEPS_INCLUDE / DEPS_LIB, see scripts/gpu/), so every package has a path-based fallback.

find_package(Torch REQUIRED)
# Torch's CMake config appends its flags to CMAKE_CXX_FLAGS only in some versions; keep the ABI flag.
set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} ${TORCH_CXX_FLAGS}")

set(AUTOOPTIM_CUDA OFF)
if(TARGET c10_cuda OR TARGET torch_cuda)
  set(AUTOOPTIM_CUDA ON)
endif()
message(STATUS "autooptim: libtorch ${Torch_VERSION}, CUDA parts: ${AUTOOPTIM_CUDA}")
if(AUTOOPTIM_CUDA)
  # Our own kernels (src/runtime/techniques/**/*.cu) are compiled by nvcc; the language is enabled at the
  # top level because every target that links the runtime links them.
  enable_language(CUDA)
endif()

set(DEPS_INCLUDE "$ENV{DEPS_INCLUDE}" CACHE STRING "Extra include dirs for dependencies (GPU machine)")
set(DEPS_LIB "$ENV{DEPS_LIB}" CACHE STRING "Extra library dir for dependencies (GPU machine)")

add_library(autooptim_deps INTERFACE)
if(DEPS_INCLUDE)
  target_include_directories(autooptim_deps SYSTEM INTERFACE ${DEPS_INCLUDE})
endif()

find_package(nlohmann_json 3 QUIET)
if(nlohmann_json_FOUND)
  target_link_libraries(autooptim_deps INTERFACE nlohmann_json::nlohmann_json)
endif()

find_package(CLI11 CONFIG QUIET)
if(CLI11_FOUND)
  target_link_libraries(autooptim_deps INTERFACE CLI11::CLI11)
endif()

# spdlog: the compiled Debian library where its CMake package is there (linked into autooptim_support
# only); header-only from DEPS_INCLUDE otherwise.
# On the GPU machine (DEPS_INCLUDE given) spdlog and fmt are used header-only, as docs/gpu.md advises.
if(DEPS_INCLUDE)
  set(_spdlog_header_only ON)
else()
  set(_spdlog_header_only OFF)
endif()
option(AUTOOPTIM_SPDLOG_HEADER_ONLY "Use spdlog and fmt header-only (no compiled libraries)" ${_spdlog_header_only})
if(NOT AUTOOPTIM_SPDLOG_HEADER_ONLY)
  find_package(spdlog CONFIG QUIET)
endif()

# The git commit of the sources, recorded at configure time for --version and the reports; the build
# reconfigures when HEAD moves, so the recorded commit follows new commits.
set(AUTOOPTIM_GIT_COMMIT "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${PROJECT_SOURCE_DIR} rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE _sha OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
  if(_rc EQUAL 0 AND _sha)
    set(AUTOOPTIM_GIT_COMMIT "${_sha}")
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${PROJECT_SOURCE_DIR} status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE _dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_dirty)
      set(AUTOOPTIM_GIT_COMMIT "${AUTOOPTIM_GIT_COMMIT}-dirty")
    endif()
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${PROJECT_SOURCE_DIR} rev-parse --absolute-git-dir
                    OUTPUT_VARIABLE _gitdir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_gitdir AND EXISTS "${_gitdir}/logs/HEAD")
      set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_gitdir}/logs/HEAD")
    endif()
  endif()
endif()
message(STATUS "autooptim: commit ${AUTOOPTIM_GIT_COMMIT}")

# OpenCV: the Debian package's config when present; otherwise the libraries by path.
find_package(OpenCV QUIET COMPONENTS core imgproc video videoio imgcodecs)
add_library(autooptim_opencv INTERFACE)
set(AUTOOPTIM_HAVE_VIDEOIO OFF)
if(OpenCV_FOUND)
  target_include_directories(autooptim_opencv SYSTEM INTERFACE ${OpenCV_INCLUDE_DIRS})
  target_link_libraries(autooptim_opencv INTERFACE opencv_core opencv_imgproc opencv_video opencv_videoio opencv_imgcodecs)
  set(AUTOOPTIM_HAVE_VIDEOIO ON)
else()
  # Debian ships OpenCVConfig.cmake only in libopencv-dev, which pulls every module; the per-module
  # packages we install have the libraries and headers, found here by path (DEPS_LIB first on the GPU
  # machine, then the system's).
  find_path(OPENCV_INCLUDE_DIR opencv2/core.hpp PATH_SUFFIXES opencv4 HINTS ${DEPS_INCLUDE} REQUIRED)
  target_include_directories(autooptim_opencv SYSTEM INTERFACE ${OPENCV_INCLUDE_DIR})
  foreach(m core imgproc video)
    find_library(OPENCV_${m}_LIB NAMES opencv_${m} libopencv_${m}.so.406 HINTS ${DEPS_LIB} REQUIRED)
    target_link_libraries(autooptim_opencv INTERFACE ${OPENCV_${m}_LIB})
  endforeach()
  find_library(OPENCV_videoio_LIB NAMES opencv_videoio HINTS ${DEPS_LIB})
  find_library(OPENCV_imgcodecs_LIB NAMES opencv_imgcodecs HINTS ${DEPS_LIB})
  if(OPENCV_videoio_LIB AND OPENCV_imgcodecs_LIB AND EXISTS "${OPENCV_INCLUDE_DIR}/opencv2/videoio.hpp")
    target_link_libraries(autooptim_opencv INTERFACE ${OPENCV_videoio_LIB} ${OPENCV_imgcodecs_LIB})
    set(AUTOOPTIM_HAVE_VIDEOIO ON)
  endif()
  if(DEPS_LIB)
    target_link_options(autooptim_opencv INTERFACE "-Wl,-rpath-link,${DEPS_LIB}:${DEPS_LIB}/blas:${DEPS_LIB}/lapack")
  endif()
  message(STATUS "autooptim: OpenCV by path (${OPENCV_core_LIB}), videoio: ${AUTOOPTIM_HAVE_VIDEOIO}")
endif()
if(AUTOOPTIM_HAVE_VIDEOIO)
  target_compile_definitions(autooptim_opencv INTERFACE AUTOOPTIM_HAVE_VIDEOIO=1)
endif()

find_library(SENTENCEPIECE_LIB NAMES sentencepiece libsentencepiece.so.0 HINTS ${DEPS_LIB} REQUIRED)
find_library(SENTENCEPIECE_TRAIN_LIB NAMES sentencepiece_train libsentencepiece_train.so.0 HINTS ${DEPS_LIB})

find_package(Threads REQUIRED)
