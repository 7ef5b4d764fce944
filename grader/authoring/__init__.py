"""Tools for the staff who write a course's spec, built on the grading itself: a spec proposed
from the staff's solution and checked against it (spec_tools), and an audit of what a spec's
checks catch of each known mistake (audit, audit_report).
"""
