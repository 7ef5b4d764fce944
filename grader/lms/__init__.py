"""The LMS running the grader: Gradescope's and PrairieLearn's runs (entrypoints) and the
Gradescope autograder zip (gradescope_zip). The gradebook files an LMS imports are a batch's
(grader/batch/lms_gradebooks.py).
"""
