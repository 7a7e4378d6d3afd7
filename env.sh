#!/usr/bin/env bash
# xinfer_ros environment.
#   source env.sh          activate the venv and the built workspace in this shell
#   ./env.sh CMD ARGS...   run one command inside that environment
# Builds first (make build) when the venv or the workspace is missing or stale.
# DDS discovery stays on loopback unless ROS_AUTOMATIC_DISCOVERY_RANGE is already set.

_xinfer_root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

_xinfer_activate() {
  make -s -C "$_xinfer_root" build >&2 || return 1
  # shellcheck disable=SC1091
  source "$_xinfer_root/.venv/bin/activate"
  if [ -z "${ROS_DISTRO:-}" ]; then
    # ROS 2 from PyPI wheels: the venv is the underlay prefix.
    export AMENT_PREFIX_PATH="$VIRTUAL_ENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
    export CMAKE_PREFIX_PATH="$VIRTUAL_ENV${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  fi
  # colcon's setup scripts reference unset variables; relax nounset while sourcing.
  local _nounset=0
  case $- in *u*) _nounset=1; set +u ;; esac
  # shellcheck disable=SC1091
  source "$_xinfer_root/install/setup.bash"
  # ROS 2's launch and ros2 command (make launch-kit, from ../shared/ros2-launch-kit).
  if [ -f "$_xinfer_root/build/ros2-launch-kit/local_setup.bash" ]; then
    # shellcheck disable=SC1091
    source "$_xinfer_root/build/ros2-launch-kit/local_setup.bash"
  fi
  [ "$_nounset" = 1 ] && set -u
  # The source tree comes first so that new modules need no rebuild; the package's
  # __path__ reaches the generated interfaces in install/.
  export PYTHONPATH="$_xinfer_root${PYTHONPATH:+:$PYTHONPATH}"
  export ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}"
  export XINFER_ROOT="$_xinfer_root"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -eo pipefail
  _xinfer_activate
  if [ "$#" -eq 0 ]; then
    echo "usage: ./env.sh CMD [ARGS...]   or   source env.sh" >&2
    exit 2
  fi
  exec "$@"
else
  _xinfer_activate
fi
