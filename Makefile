# make test : install what is missing, build, run every test.
# make demo : install, build, run autooptim on the embedded tiny model.
# make format: rewrite the C++ sources to .clang-format (checked by make test).
# make gpu  : the CUDA build, against a CUDA libtorch (LIBTORCH=<its cmake prefix>; found from python3's
#             torch when not given). See README, "GPU build".
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

GPU_BUILD ?= build-gpu
# sm_90 (H100/H200); set e.g. TORCH_CUDA_ARCH_LIST=8.0 for an A100.
TORCH_CUDA_ARCH_LIST ?= 9.0
LIBTORCH ?= $(shell python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)

.PHONY: all deps configure build test demo clean gpu format

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@[ -f $(BUILD)/build.ninja ] || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The demo needs the binary only, not the ~50 test executables (a third of a fresh build's time).
demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target autooptim
	bash scripts/demo.sh $(BUILD)

gpu:
	@[ -n "$(LIBTORCH)" ] || { echo "make gpu: set LIBTORCH=<libtorch>/share/cmake (a CUDA libtorch), or install python3 torch with CUDA" >&2; exit 2; }
	cmake -S . -B $(GPU_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$(LIBTORCH)" \
	  -DTORCH_CUDA_ARCH_LIST=$(TORCH_CUDA_ARCH_LIST) $(CMAKE_FLAGS)
	cmake --build $(GPU_BUILD) -j $(JOBS)
	@$(GPU_BUILD)/autooptim --version

# Rewrites every C++/CUDA file to .clang-format (the test code_format checks it).
format: deps
	git ls-files 'src/*' 'apps/*' 'tests/*' | grep -E '\.(h|cpp|cu|cuh)$$' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
