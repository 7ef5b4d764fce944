"""Starting and talking to one submission's kernel: the session the grading runs in
(session), its connection with bounded messages (client), kernels forked from a warm parent
(forked), checking what a kernel sends back (replies), running a notebook's cells (runner),
what a run produced (run_record), and every override of a private nbclient or jupyter_client
method (upstream).
"""
