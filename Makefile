# xinfer_ros: setup, build, test, demo. Everything lands inside this directory.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.xinfer-setup
BUILD_STAMP := install/.xinfer-build
ROS_SOURCES := $(wildcard msg/*.msg srv/*.srv) CMakeLists.txt package.xml
# The package's folders: one changes when a module is added or removed, which the
# symlinked install only picks up when rebuilt (edits to existing modules need no build).
PY_DIRS := $(shell find xinfer_ros -type d -not -name __pycache__)
# ROS 2's launch, launch_testing and ros2 command, where the shared kit is beside this
# checkout (the PyPI wheels lack them; a plain clone skips the tests that need them).
LAUNCH_KIT := ../shared/ros2-launch-kit
KIT_PREFIX := build/ros2-launch-kit
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST

.PHONY: help setup build launch-kit test test-slow test-extended test-all lint demo clean distclean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

setup: $(VENV_STAMP)  ## create .venv with the pinned dependencies

# With a system ROS (ROS_DISTRO set) the venv sees its rclpy and skips the wheels.
$(VENV_STAMP): requirements/base.txt requirements/ros.txt setup.py scripts/repair_ros_wheels.py
	@echo "[setup] creating $(VENV) (first run downloads packages; later runs reuse them)"
	@if [ -n "$$ROS_DISTRO" ]; then $(PYTHON) -m venv --system-site-packages $(VENV); \
	 else $(PYTHON) -m venv $(VENV); fi
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q torch==2.13.0
	$(VPY) -m pip install -q -r requirements/base.txt
	@if [ -z "$$ROS_DISTRO" ]; then \
	   $(VPY) -m pip install -q -r requirements/ros.txt && \
	   $(VPY) scripts/repair_ros_wheels.py $(VENV); \
	 else echo "[setup] using the system ROS 2 $$ROS_DISTRO"; fi
	$(VPY) -m pip install -q --no-deps --no-build-isolation -e .
	@touch $@

build: $(BUILD_STAMP)  ## generate the ROS interfaces and install the package (colcon)

$(BUILD_STAMP): $(VENV_STAMP) $(ROS_SOURCES) $(PY_DIRS) $(wildcard launch/* config/* config/*/* scripts/nodes/*)
	@echo "[build] colcon build"
	@mkdir -p log && source $(VENV)/bin/activate && \
	 if [ -z "$$ROS_DISTRO" ]; then \
	   export AMENT_PREFIX_PATH="$$VIRTUAL_ENV" CMAKE_PREFIX_PATH="$$VIRTUAL_ENV"; fi && \
	 colcon --log-base log build --symlink-install --base-paths . \
	   --event-handlers console_cohesion- status- \
	   --cmake-args -DPython3_EXECUTABLE=$(CURDIR)/$(VPY) -DBUILD_TESTING=OFF > log/colcon-build.txt 2>&1 \
	 || { mkdir -p log; tail -50 log/colcon-build.txt; exit 1; }
	@touch $@

launch-kit: setup  ## install ROS 2 launch and the ros2 command from ../shared (if present)
	@if [ -x "$(LAUNCH_KIT)/install.sh" ]; then bash "$(LAUNCH_KIT)/install.sh" $(VENV) $(KIT_PREFIX); \
	 else echo "[launch-kit] $(LAUNCH_KIT) is absent: launch tests will skip"; fi

test: build launch-kit  ## lint and type-check, then every test not marked slow (the README's test command)
	./env.sh ruff check .
	./env.sh mypy
	./env.sh python -m pytest -m "not slow"

test-slow: build launch-kit  ## the slow tests CI runs: whole fleets, launch, restarts, bags
	./env.sh python -m pytest -m "slow and not extended" --durations=15

test-extended: build launch-kit  ## slow tests outside CI's 30 minutes: packaging, GPU script dry run, bench smokes
	./env.sh python -m pytest -m extended

test-all: test test-slow test-extended  ## everything (CI runs test and test-slow)

lint: setup  ## ruff and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

demo: build  ## run a small fleet (3 robots, tiny model on CPU, 60 s) and report
	./env.sh python -m xinfer_ros.cli.fleet $(DEMO_ARGS)

clean:  ## remove build outputs (keeps the venv)
	rm -rf build install log

distclean: clean  ## remove build outputs and the venv
	rm -rf $(VENV)
