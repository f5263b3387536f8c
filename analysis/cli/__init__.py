"""The command lines: analyze-trace (analyze.py), nsys-transfer verify (verify.py), scrub-trace (scrub.py)."""
