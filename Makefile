# weft build. `make` builds build/libweft.a, build/weft, the unit tests and the
# benchmarks. Knobs (all optional):
#   CC=clang            another compiler (gcc and clang are both supported)
#   BUILD=build-x       output folder (default: build, or build-<sanitizer>)
#   SANITIZE=address,undefined | thread
#   WERROR=1            warnings are errors (CI sets it)
#   OPT=-O2             optimisation flags
#   V=1                 print full compiler command lines
CC       ?= cc
SANITIZE ?=
WERROR   ?= 0
OPT      ?= -O2 -g
ifeq ($(SANITIZE),)
BUILD    ?= build
else
BUILD    ?= build-$(subst $(comma),-,$(SANITIZE))
endif
comma := ,
ifeq ($(V),1)
Q :=
else
Q := @
endif

PKGS     := libpcre2-8 jansson libzstd zlib libxxhash openblas gumbo libutf8proc libdw libcurl
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   := $(shell pkg-config --libs $(PKGS))

WARN := -Wall -Wextra -Wpedantic -Wshadow -Wvla -Wmissing-prototypes \
        -Wstrict-prototypes -Wold-style-definition -Wformat=2 -Wundef \
        -Wpointer-arith -Wwrite-strings -Wcast-align -Wno-unused-parameter \
        -Wno-missing-field-initializers
# -Wno-missing-field-initializers: the option tables (wf_opt, wf_cmd_spec)
# are written in order and leave their optional trailing members out (an
# option's `choices`, NULL unless it is an enum option), which C sets to
# zero; -Wextra would otherwise require every table to spell them.
ifeq ($(WERROR),1)
WARN += -Werror
endif

CPPFLAGS := -Iinclude -Isrc -D_GNU_SOURCE
CFLAGS   := -std=c11 $(OPT) $(WARN) -pthread $(PKG_CFLAGS) $(EXTRA_CFLAGS)
# CLD2 (language id in src/prep/langid.c) ships no pkg-config file.
LDLIBS   := $(PKG_LIBS) -lcld2 -lm -ldl -pthread
# OpenMP for the model's kernels (src/kernels), one runtime per process:
# gcc's libgomp, which Debian's OpenMP build of OpenBLAS also uses, so the
# kernels' loops and sgemm share one thread pool. Two builds run the loops
# on one thread instead (OpenBLAS still threads): ThreadSanitizer, which
# does not see libgomp's synchronisation and reports false races, and
# clang, whose OpenMP code needs its own runtime, libomp: OpenBLAS's libgomp
# calls would then be served by libomp's compatibility layer, a mix OpenBLAS
# does not support (it ran sgemm on one thread when tried). -fopenmp=libgomp
# makes clang link libgomp and ignore the pragmas.
ifneq ($(findstring thread,$(SANITIZE)),)
CFLAGS  += -Wno-unknown-pragmas
else ifneq ($(findstring clang,$(CC)),)
CFLAGS  += -fopenmp=libgomp
else
CFLAGS  += -fopenmp
endif
ifneq ($(SANITIZE),)
CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -DWF_NO_CLONES
LDFLAGS += -fsanitize=$(SANITIZE)
endif

LIB_SRC   := $(sort $(wildcard src/*/*.c))
TOOL_SRC  := $(sort $(wildcard tools/*.c))
TEST_SRC  := $(sort $(wildcard tests/unit/test_*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))
TTOOL_SRC := $(sort $(wildcard tests/tools/*.c))
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz_*.c))

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN  := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
TTOOL_BIN := $(TTOOL_SRC:tests/tools/%.c=$(BUILD)/tests/tools/%)
# Fuzz targets (tests/fuzz/fuzz_NAME.c -> $(BUILD)/fuzz/NAME, docs/fuzzing.md).
FUZZ_BIN  := $(FUZZ_SRC:tests/fuzz/fuzz_%.c=$(BUILD)/fuzz/%)
# Code the tests/tools programs share (tests/tools/lib/), linked into each.
TTOOL_LIB := $(patsubst %.c,$(BUILD)/obj/%.o,$(sort $(wildcard tests/tools/lib/*.c)))
# Code the benchmarks share (bench/lib/: options, CPU clock, batch), linked into each.
BENCH_LIB := $(patsubst %.c,$(BUILD)/obj/%.o,$(sort $(wildcard bench/lib/*.c)))
# The unit tests' harness and the helpers they share (tests/unit/*.c that
# are not test_*.c: harness.c, model_fixture.c), linked into each.
TEST_LIB  := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out $(TEST_SRC),$(sort $(wildcard tests/unit/*.c))))

# The AdamW update's sqrtf vectorises only without errno (bench/README.md,
# "Measurements behind choices in the code").
$(BUILD)/obj/src/kernels/kern_adamw.o: CFLAGS += -fno-math-errno

# The run record (run.json) states how weft was built and where its source is.
RECORD_DEFS := -DWF_BUILD_CC='"$(CC)"' -DWF_SOURCE_DIR='"$(CURDIR)"' \
    -DWF_BUILD_CFLAGS='"$(subst ',,$(subst ",,$(CPPFLAGS) $(CFLAGS)))"'
$(BUILD)/obj/src/obs/obs_record.o: CPPFLAGS += $(RECORD_DEFS)

.PHONY: all lib tests bench mpi-backends nccl gpu-bundle cuda cudaemu fuzz fuzz-targets pic pic-link-flags clean
all: $(BUILD)/weft tests bench mpi-backends nccl cudaemu
lib: $(BUILD)/libweft.a
tests: $(TEST_BIN) $(TTOOL_BIN) $(FUZZ_BIN)
bench: $(BENCH_BIN)

$(BUILD)/libweft.a: $(LIB_OBJ)
	@rm -f $@
	$(Q)$(AR) rcs $@ $^

$(BUILD)/weft: $(TOOL_OBJ) $(BUILD)/libweft.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libweft.a $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(TEST_LIB) $(BUILD)/libweft.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(TEST_LIB) $(BUILD)/libweft.a $(LDLIBS)

# Helper programs of the Python tests (tests/tools/*.c), e.g. model_dump.
$(BUILD)/tests/tools/%: $(BUILD)/obj/tests/tools/%.o $(TTOOL_LIB) $(BUILD)/libweft.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(TTOOL_LIB) $(BUILD)/libweft.a $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BENCH_LIB) $(BUILD)/libweft.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BENCH_LIB) $(BUILD)/libweft.a $(LDLIBS)

# The library compiled as position-independent code, for linking into a
# shared object: the Python package's extension (python/, docs/python.md)
# links build-pic/libweft.a, and `make -s pic-link-flags` prints the
# libraries (and OpenMP flag) such a link needs.
pic:
	$(Q)$(MAKE) --no-print-directory lib BUILD=build-pic EXTRA_CFLAGS="$(EXTRA_CFLAGS) -fPIC"
pic-link-flags:
	@echo $(filter -fopenmp%,$(CFLAGS)) $(LDLIBS)

# Fuzz targets. `make fuzz` builds them with libFuzzer into build-fuzz/fuzz/
# (clang, -fsanitize=fuzzer,address,undefined; the library with
# fuzzer-no-link for coverage). Every other build links the same targets
# with tests/fuzz/driver.c, a main() that replays files through them, so
# the regression inputs and seed corpus run in the gcc and sanitizer
# builds too (tests/py/test_fuzz_regressions.py).
FUZZ_CC ?= clang
fuzz:
	$(Q)$(MAKE) --no-print-directory fuzz-targets CC=$(FUZZ_CC) BUILD=build-fuzz \
	    SANITIZE=fuzzer-no-link,address,undefined OPT="-O1 -g"
fuzz-targets: $(FUZZ_BIN)
ifneq ($(findstring fuzzer,$(SANITIZE)),)
FUZZ_MAIN := -fsanitize=fuzzer
FUZZ_DEP  :=
else
FUZZ_MAIN := $(BUILD)/obj/tests/fuzz/driver.o
FUZZ_DEP  := $(FUZZ_MAIN)
endif
$(BUILD)/fuzz/%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(FUZZ_DEP) $(BUILD)/libweft.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(FUZZ_MAIN) $(BUILD)/libweft.a $(LDLIBS)

# MPI backends of src/comm (docs/distributed.md): one shared object per MPI
# implementation, opened by weft with dlopen under a launcher, so that weft
# itself never links libmpi. Each is built when its compiler wrapper is
# installed (scripts/setup.sh installs both). The wrappers give the include
# and library flags; $(CC) compiles, with mpi.h as a system header so that
# the strict warnings apply to weft's code only.
MPI_IMPLS    := $(if $(shell command -v mpicc.openmpi),openmpi) $(if $(shell command -v mpicc.mpich),mpich)
MPI_BACKENDS := $(MPI_IMPLS:%=$(BUILD)/libweft-mpi-%.so)
MPI_BE_FLAGS  = -std=c11 $(OPT) $(WARN) -fPIC -shared -fvisibility=hidden $(CPPFLAGS)
ifneq ($(SANITIZE),)
MPI_BE_FLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
endif
mpi_inc  = $(patsubst -I%,-isystem %,$(filter -I%,$(1)))
mpi_link = $(filter -L% -l% -Wl$(comma)%,$(1))
mpi-backends: $(MPI_BACKENDS)
$(BUILD)/libweft-mpi-openmpi.so: src/comm/mpi/comm_mpi.c src/comm/comm_backend.h
	@mkdir -p $(dir $@)
	@echo "  MPI     $@"
	$(Q)$(CC) $(MPI_BE_FLAGS) $(call mpi_inc,$(shell mpicc.openmpi -showme:compile)) -o $@ $< $(call mpi_link,$(shell mpicc.openmpi -showme:link))
$(BUILD)/libweft-mpi-mpich.so: src/comm/mpi/comm_mpi.c src/comm/comm_backend.h
	@mkdir -p $(dir $@)
	@echo "  MPI     $@"
	$(Q)$(CC) $(MPI_BE_FLAGS) $(call mpi_inc,$(shell mpicc.mpich -compile-info)) -o $@ $< $(call mpi_link,$(shell mpicc.mpich -link-info))

# The NCCL communicator backend (src/comm/nccl, docs/distributed.md): plain
# C, no CUDA header, no CUDA library (it dlopens libnccl.so.2 and
# libcudart.so.13), so it is built everywhere. Its test twin
# build/libnccl-emu.so (tests/emu/nccl_emu.c: NCCL and the CUDA runtime
# calls it makes, emulated over Open MPI on host memory) needs mpicc.openmpi.
NCCL_EMU := $(if $(filter openmpi,$(MPI_IMPLS)),$(BUILD)/libnccl-emu.so)
nccl: $(BUILD)/libweft-nccl.so $(NCCL_EMU)
$(BUILD)/libweft-nccl.so: src/comm/nccl/comm_nccl.c src/comm/nccl/nccl_abi.h src/comm/comm_backend.h
	@mkdir -p $(dir $@)
	@echo "  NCCL    $@"
	$(Q)$(CC) $(MPI_BE_FLAGS) -o $@ $< -ldl
$(BUILD)/libnccl-emu.so: tests/emu/nccl_emu.c src/comm/nccl/nccl_abi.h
	@mkdir -p $(dir $@)
	@echo "  NCCLEMU $@"
	$(Q)$(CC) $(MPI_BE_FLAGS) $(call mpi_inc,$(shell mpicc.openmpi -showme:compile)) -o $@ $< $(call mpi_link,$(shell mpicc.openmpi -showme:link))

# What travels to a GPU machine (docs/gpu.md, "The GPU bundle"): the build
# and the closure of its non-glibc libraries, zstd-packed, under 64 MiB.
gpu-bundle: all
	$(Q)scripts/gpu_bundle.sh $(BUILD)

# The CUDA backend (src/cuda/, docs/gpu.md), one source compiled two ways.
# `make cudaemu`: by the host C++ compiler against the emulator, the test
# backend build/libweft-cudaemu.so, plus two builds with a planted fault
# each (a missing __syncthreads, an off-by-one write) that the tests must
# catch. `make cuda`: by nvcc, static cudart, sm_90a code plus compute_90
# PTX, warnings (ptxas's spills, local memory, double precision too) as
# errors: build/libweft-cuda.so, and build/cuda-resources.txt, each kernel's
# registers, shared memory and stack from ptxas -v (the committed copy is
# src/cuda/resources.txt); one line and nothing else without nvcc.
NVCC     ?= $(or $(shell command -v nvcc),$(wildcard /usr/local/cuda/bin/nvcc))
CXX_EMU  ?= $(if $(findstring clang,$(CC)),clang++,g++)
CUDA_SRC := src/cuda/backend_cuda.cu
CUDA_DEP := $(CUDA_SRC) src/cuda/kernels.cuh src/cuda/cuda_compat.h src/kernels/backend_impl.h include/weft/backend.h
EMU_DEP  := $(CUDA_DEP) src/cuda/emu/cuda_emu.h src/cuda/emu/cuda_emu.cc
EMU_FLAGS = -std=c++17 -x c++ -O1 -g -fPIC -shared -fvisibility=hidden -ffp-contract=off -Wall -Wextra \
            -Wshadow -Wno-unused-parameter $(if $(filter 1,$(WERROR)),-Werror) $(CPPFLAGS) \
            $(shell pkg-config --cflags openblas) $(if $(SANITIZE),-fsanitize=$(SANITIZE) -fno-omit-frame-pointer)
EMU_LIBS := $(shell pkg-config --libs openblas)
EMU_PLANTS := $(BUILD)/cudaemu-plant/no-sync/libweft-cudaemu.so $(BUILD)/cudaemu-plant/off-by-one/libweft-cudaemu.so
.PHONY: cuda cudaemu
cudaemu: $(BUILD)/libweft-cudaemu.so $(EMU_PLANTS) $(BUILD)/tests/cuda_emu
# The emulator's own unit test (tests/cuda/, run by tests/py/test_cudaemu.py).
$(BUILD)/tests/cuda_emu: tests/cuda/test_cuda_emu.cc src/cuda/emu/cuda_emu.h src/cuda/emu/cuda_emu.cc src/cuda/cuda_compat.h
	@mkdir -p $(dir $@)
	@echo "  CXX     $@"
	$(Q)$(CXX_EMU) $(filter-out -fPIC -shared -fvisibility=hidden,$(EMU_FLAGS)) -o $@ tests/cuda/test_cuda_emu.cc src/cuda/emu/cuda_emu.cc
$(BUILD)/libweft-cudaemu.so: $(EMU_DEP)
	@mkdir -p $(dir $@)
	@echo "  CXX     $@"
	$(Q)$(CXX_EMU) $(EMU_FLAGS) -o $@ $(CUDA_SRC) src/cuda/emu/cuda_emu.cc $(EMU_LIBS)
$(BUILD)/cudaemu-plant/no-sync/libweft-cudaemu.so: $(EMU_DEP)
	@mkdir -p $(dir $@)
	@echo "  CXX     $@"
	$(Q)$(CXX_EMU) $(EMU_FLAGS) -DWF_CUDA_PLANT_NO_SYNC -o $@ $(CUDA_SRC) src/cuda/emu/cuda_emu.cc $(EMU_LIBS)
$(BUILD)/cudaemu-plant/off-by-one/libweft-cudaemu.so: $(EMU_DEP)
	@mkdir -p $(dir $@)
	@echo "  CXX     $@"
	$(Q)$(CXX_EMU) $(EMU_FLAGS) -DWF_CUDA_PLANT_OFF_BY_ONE -o $@ $(CUDA_SRC) src/cuda/emu/cuda_emu.cc $(EMU_LIBS)
NVCC_FLAGS := -std=c++17 -O3 -shared --cudart static -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Wno-unused-parameter \
              -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90 \
              --Werror all-warnings -Xptxas --warn-on-spills,--warn-on-local-memory-usage,--warn-on-double-precision-use,--warning-as-error \
              -Iinclude -Isrc -D_GNU_SOURCE
ifneq ($(NVCC),)
cuda: $(BUILD)/libweft-cuda.so
$(BUILD)/libweft-cuda.so: $(CUDA_DEP)
	@mkdir -p $(dir $@)
	@echo "  NVCC    $@"
	$(Q)$(NVCC) $(NVCC_FLAGS) -Xptxas -v -o $@ $(CUDA_SRC) -ldl 2> $(BUILD)/cuda-ptxas.log || \
	    { grep -v '^ptxas info\|bytes stack frame' $(BUILD)/cuda-ptxas.log; rm -f $@; exit 1; }
	$(Q)python3 scripts/cuda_resources.py < $(BUILD)/cuda-ptxas.log > $(BUILD)/cuda-resources.txt
else
cuda:
	@echo "cuda: no nvcc (PATH, /usr/local/cuda/bin): $(BUILD)/libweft-cuda.so skipped"
endif

# Everything is rebuilt when the compiler or its flags change (make itself
# only compares file times): the flags line is kept in $(BUILD)/.flags.
# `make pic` and `make pic-link-flags` build nothing in $(BUILD) (pic runs
# a make of build-pic/), so they leave its stamp alone: rewriting it with
# their flags (no WERROR=1, say) would rebuild the main build next time.
FLAGS_LINE  := $(strip $(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(LDLIBS))
FLAGS_STAMP := $(BUILD)/.flags
ifneq ($(filter-out pic pic-link-flags,$(or $(MAKECMDGOALS),all)),)
ifneq ($(FLAGS_LINE),$(strip $(shell cat $(FLAGS_STAMP) 2>/dev/null)))
$(shell mkdir -p $(BUILD) && printf '%s\n' '$(FLAGS_LINE)' > $(FLAGS_STAMP))
endif
endif

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP) Makefile
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

# The CLI sees the public headers only (include/weft/): a command that
# reached into src/ would not compile.
TOOL_CPPFLAGS := -Iinclude -D_GNU_SOURCE
$(BUILD)/obj/tools/%.o: tools/%.c $(FLAGS_STAMP) Makefile
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(TOOL_CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

clean:
	rm -rf build build-*

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
