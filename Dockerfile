# Minimal image: the grader installed non-editably, grading a mounted notebook.
FROM python:3.11-slim
WORKDIR /opt/grader
COPY pyproject.toml README.md ./
COPY grader ./grader
COPY reference ./reference
COPY templates ./templates
RUN pip install --no-cache-dir . && useradd --create-home student
USER student
ENTRYPOINT ["grader"]
CMD ["--help"]
