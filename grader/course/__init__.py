"""What a course brings: its assignment spec (spec), and the support modules shipped with a spec
that the students' code imports (support_modules).
"""
