"""Grading one function of a submission: calling it in the kernel (prober.py) and judging what
came back, check by check (function_grading.py). grader/grade.py runs the submission's pipeline
around it."""
