"""A student's own loop: checking from inside the notebook (in_notebook) and grading again on
each save (regrade_on_save).
"""
