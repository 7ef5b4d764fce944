"""Finding and reading submissions: which files in a folder, archive or LMS download are
whose (discover), each read into a notebook (notebook), the grader's own cells taken out
(own_cells), and what its source shows before it runs (source_scan).
"""
