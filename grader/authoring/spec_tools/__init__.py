"""Tools for course staff: `grader spec infer` proposes a spec from the staff's own solution
(`infer`), `grader spec check` validates one and grades a solution with it (`check`)."""
