"""Isolating a submission's kernel, from the grader's side: limits, namespaces or Landlock,
cgroups, the unprivileged user (isolation); where the kernel could import from (import_paths);
and removing everything a submission left (leftovers), even when the grader is killed (reaper).
"""
