# Thin wrapper over Meson (HACKING.md). Installs missing Debian packages first.
BUILD ?= build
PLANNER := $(BUILD)/planner/planner
DEPS := meson ninja-build pkg-config g++ libcli11-dev libyaml-cpp-dev libfmt-dev libeigen3-dev doctest-dev cmake libopenmpi-dev openmpi-bin python3 python3-venv python3-pyflakes python3-yaml clang-format slurm-wlm munge chromium
MESON_FLAGS ?=

.PHONY: all deps build demo test test-sanitize bench clean exports-venv

all: build

deps:
	@missing=""; for p in $(DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_FLAGS)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

# The main job on the bundled default example: plan the tiny GPT for the
# local CPU ranks and GPT-3 175B for 1024 A100s, then show the latter.
demo: build
	$(PLANNER) profile configs/models/tiny-gpt.yaml --device cpu --threads 1 --microbatch-sizes 1,2,4 -o tiny-gpt.profile.yaml
	$(PLANNER) solve --gpus 2 --model configs/models/tiny-gpt.yaml --profile tiny-gpt.profile.yaml --cluster configs/clusters/local-cpu.yaml --schedule gpipe,1f1b -o tiny-gpt.plan.yaml
	$(PLANNER) solve --gpus 64 --model configs/models/tiny-gpt.yaml --cluster configs/clusters/dgx-a100.yaml -o tiny-gpt-64.plan.yaml
	$(PLANNER) codegen tiny-gpt-64.plan.yaml -o launch-64 --device cuda
	$(PLANNER) codegen tiny-gpt.plan.yaml -o launch --iterations 20
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 bash launch/run.sh --run-id demo
	$(PLANNER) inspect launch/runs/demo
	$(PLANNER) solve --gpus 1024 --model configs/models/gpt3-175b.yaml --cluster configs/clusters/dgx-a100.yaml -o gpt3-175b.plan.yaml
	$(PLANNER) inspect gpt3-175b.plan.yaml --svg gpt3-175b.timeline.svg --html gpt3-175b.html
	$(PLANNER) solve --gpus 1024,2048,4096,8192 --model configs/models/llama3-70b.yaml --cluster configs/clusters/dgx-h100.yaml --train-tokens 15T --html llama3-70b.html
	@echo "demo: HTML reports in $(CURDIR)/gpt3-175b.html and $(CURDIR)/llama3-70b.html (one file each; open in a browser)"

# The engines the export tests run for real (torch, megatron-core, deepspeed, torchtitan from
# PyPI, pinned in tests/exports/requirements.txt; reused while the pins are unchanged).
exports-venv:
	bash tests/exports/setup_venv.sh
	bash tests/exports/setup_bridge_venv.sh; rc=$$?; [ $$rc = 0 ] || [ $$rc = 77 ]

# A venv that cannot be installed does not stop the other tests: the export tests then fail, each
# naming the reason (tests/exports/venv_python.sh).
test: build
	-bash tests/exports/setup_venv.sh
	-bash tests/exports/setup_bridge_venv.sh
	meson test -C $(BUILD) --print-errorlogs --no-suite bench

# The unit tests, the bad-input corpus and the fuzz corpus replay again in a build with AddressSanitizer
# and UndefinedBehaviorSanitizer (any report fails the test: meson sets halt_on_error); the CI job
# (.ci/run) runs it after `make test`. No CUDA, no benchmarks: what is checked is the host code. Time
# limits x 4: the training suite needs several minutes under the sanitizers. Not
# -Dwerror: with the sanitizers GCC 12 warns falsely inside libstdc++'s <regex> (maybe-uninitialized);
# the main build keeps warnings as errors.
SAN_BUILD ?= build-san
test-sanitize: deps
	[ -f $(SAN_BUILD)/build.ninja ] || meson setup $(SAN_BUILD) -Dcuda=disabled -Dbench=false -Db_sanitize=address,undefined -Dbuildtype=debugoptimized
	ninja -C $(SAN_BUILD)
	PLANNER_CORPUS_LIMIT_S=120 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1 \
	  meson test -C $(SAN_BUILD) --print-errorlogs --timeout-multiplier 4 --suite unit --suite training --suite badinput --suite mpi_leaks

bench: build
	bash bench/run_solver_bench.sh

clean:
	rm -rf $(BUILD)
