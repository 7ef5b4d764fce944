"""How a student's function is called and what it returned: a course's calling convention
(conventions, params, classes), seeded inputs in it (cases), and the returned value turned into
canonical arrays (returns).
"""
