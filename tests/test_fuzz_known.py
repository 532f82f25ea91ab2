"""Findings of ``tests/test_fuzz.py`` tolerated for now, each with the reason.

A case is ``(baseline, parameter, bad-value label)`` or ``(entry point, bad-value label)``.
``test_known_findings_still_listed_are_real`` fails once a listed case is fixed, so the list only
shrinks; ``docs/bad_input.md`` lists the same cases.
"""

KNOWN: dict[tuple, str] = {
}
