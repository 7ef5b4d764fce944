# The grader's images for LMS autograding, one target each (see docs/lms.md, "Autograding in an LMS"):
#   docker build --platform linux/amd64 --target prairielearn -t ACCOUNT/attention-grader:prairielearn .
#   docker build --platform linux/amd64 --target gradescope -t ACCOUNT/attention-grader:gradescope .
# Both install the grader as Gradescope's zip does: lms/setup.sh, from a wheel built here.

# The Gradescope base image's tag (a FROM can use only an ARG declared before the first FROM).
ARG GRADESCOPE_TAG=ubuntu-22.04

# The grader's wheel, from this checkout.
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY grader ./grader
COPY reference ./reference
COPY templates ./templates
RUN pip wheel --no-cache-dir --no-deps -w /wheel .

# PrairieLearn runs a public Docker Hub image (linux/amd64) as root, with the question's files
# in /grade, and the image's own command unless the question names an entrypoint.
FROM python:3.11-slim AS prairielearn
ENV PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLBACKEND=Agg \
    GRADER_HOME=/opt/attention-grader
COPY --from=wheel /wheel /opt/attention-grader-source
COPY lms/setup.sh constraints.txt /opt/attention-grader-source/
# setup.sh makes the grader's package readable by root only: the kernel runs student code as "nobody".
# It installs the dependencies at the versions CI tested (constraints.txt, beside it).
RUN bash /opt/attention-grader-source/setup.sh \
    && rm -rf /opt/attention-grader-source
COPY lms/prairielearn_entrypoint /usr/local/bin/prairielearn-grade
RUN chmod 755 /usr/local/bin/prairielearn-grade && mkdir -p /grade/student /grade/results
WORKDIR /grade
CMD ["/usr/local/bin/prairielearn-grade"]

# Gradescope's "Manual Docker configuration" needs an image built from gradescope/autograder-base
# with /autograder/run_autograder, and the base image's CMD and ENTRYPOINT (its harness) kept.
FROM gradescope/autograder-base:${GRADESCOPE_TAG} AS gradescope
ENV PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLBACKEND=Agg \
    GRADER_HOME=/opt/attention-grader
COPY --from=wheel /wheel /autograder/source
COPY lms/setup.sh lms/run_autograder constraints.txt /autograder/source/
# As Gradescope does with the zip: setup.sh in /autograder/source, run_autograder copied to /autograder;
# the dependencies at the versions CI tested (constraints.txt, beside setup.sh).
RUN bash /autograder/source/setup.sh \
    && install -m 755 /autograder/source/run_autograder /autograder/run_autograder \
    && apt-get clean && rm -rf /var/lib/apt/lists/*
