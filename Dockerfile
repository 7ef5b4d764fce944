# The grader for LMS autograding: Gradescope (/autograder) and PrairieLearn (/grade).
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLBACKEND=Agg

WORKDIR /opt/grader
COPY pyproject.toml README.md ./
COPY grader ./grader
COPY reference ./reference
COPY templates ./templates

# Installed non-editably; the grader, its reference and the specs are then made unreadable for
# everyone but root, so the unprivileged user that runs student code cannot read them.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN pip install --no-cache-dir . \
    && python -c "import grader, os; print(os.path.dirname(grader.__file__))" | xargs chmod -R go-rwx \
    && rm -rf /opt/grader/grader /opt/grader/reference /opt/grader/templates

COPY lms/run_autograder /autograder/run_autograder
COPY lms/prairielearn_entrypoint /usr/local/bin/prairielearn-grade
RUN chmod 755 /autograder/run_autograder /usr/local/bin/prairielearn-grade \
    && mkdir -p /autograder/submission /autograder/results /grade/student /grade/results \
    && chmod 755 /autograder/results /grade/results

WORKDIR /autograder
# Runs as root: the grader drops the student's kernel to the unprivileged user "nobody".
CMD ["/autograder/run_autograder"]
