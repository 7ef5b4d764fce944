"""A class at once: grading a folder into OUTDIR (run), one submission as a worker task (tasks),
the worker pool and its retries (pool), stored results and resuming (stored), progress
(progress), the class files (class_files: grades.csv from gradebook, the LMS's gradebooks from
lms_gradebooks, the summary), staff overrides (staff_overrides), Dask (dask_cluster) and similar
submissions (similarity).
"""
