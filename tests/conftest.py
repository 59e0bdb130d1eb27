"""Global test strictness lives in pyproject (warnings are errors, a timeout on every test)."""
