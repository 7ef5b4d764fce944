"""Comparing with the reference: the checks and how each judges (checks), what explains a
value (explain), naming the mistake (diagnosis), the rule for what counts as an answer at all
(answers), the smallest failing case (smallest), and the seeds the inputs are drawn from (seeds).
"""
