#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image from the zip that
# `grader lms package gradescope` makes: the zip is unpacked into /autograder/source, beside
# this script. It installs the grader from the wheel in the zip (the package is not on PyPI;
# its dependencies come from PyPI, at the versions CI tested: constraints.txt beside this
# script) into a virtual environment of its own, so the python3 that Gradescope's harness runs
# on keeps its own packages. The Dockerfile runs it too.
#   PYTHON        the interpreter to build the environment with (default: python3)
#   GRADER_HOME   the environment's folder (default: /opt/attention-grader); run_autograder
#                 reads the same variable
set -euo pipefail
SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
GRADER_HOME="${GRADER_HOME:-/opt/attention-grader}"

# Ubuntu's python3 makes a virtual environment only with python3-venv installed.
if ! "$PYTHON" -m venv --clear "$GRADER_HOME"; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y python3 python3-venv python3-pip
    "$PYTHON" -m venv --clear "$GRADER_HOME"
fi
wheels=("$SOURCE"/attention_grader-*.whl)
"$GRADER_HOME/bin/python" -m pip install --quiet --upgrade pip
constraints=()
if [ -f "$SOURCE/constraints.txt" ]; then
    constraints=(-c "$SOURCE/constraints.txt")
fi
"$GRADER_HOME/bin/python" -m pip install --quiet "${constraints[@]}" "${wheels[0]}"

# The grader, its reference and the course's files (the spec names hidden checks) are readable
# by root only: the kernel runs student code as the unprivileged user "nobody".
"$GRADER_HOME/bin/python" -c "import grader, os; print(os.path.dirname(grader.__file__))" | xargs chmod -R go-rwx
chmod -R go-rwx "$SOURCE"
"$GRADER_HOME/bin/grader" --version
